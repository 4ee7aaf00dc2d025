/* Shared CUnit runner for every llmhost test program.
 *
 * Each test program defines its suites as CU_SuiteInfo arrays and calls lh_test_main. The
 * runner prints CUnit's basic report and one machine-readable line
 *     LH-TEST-SUMMARY passed=P failed=F skipped=S
 * which tools/test_summary.py adds up over all programs. A test that cannot run here calls
 * LH_TEST_SKIP("reason") and returns: it is counted as skipped, never as passed. */
#ifndef LH_TEST_RUNNER_H
#define LH_TEST_RUNNER_H

#include <CUnit/CUnit.h>
#include <stdbool.h>

int lh_test_main(int argc, char **argv, CU_SuiteInfo *suites);
void lh_test_mark_skipped(const char *test_name, const char *reason);

#define LH_TEST_SKIP(reason) lh_test_mark_skipped(__func__, (reason))

/* Directory helpers for tests that lay out plugin dirs. */
/* Creates a fresh directory under $TMPDIR (mode 0755); returns a malloc'ed absolute path. */
char *lh_test_mkdtemp(void);
/* Recursively removes a directory created by lh_test_mkdtemp. */
void lh_test_rmtree(const char *path);
/* Copies src to dir/name with mode; returns 0 on success. */
int lh_test_copy_file(const char *src, const char *dir, const char *name, unsigned mode);
/* Writes text to dir/name; returns 0 on success. */
int lh_test_write_file(const char *dir, const char *name, const char *text);
/* Path of a build artifact directory passed by meson via environment (e.g. LH_TEST_PLUGINS).
 * Aborts the test program with a message when unset: the build, not the test, is wrong. */
const char *lh_test_env(const char *name);

#endif
