#!/bin/sh
# The entry point of README's two commands: makes sure `make` exists (a minimal Debian image
# has none; as root it is installed), then runs `make` with the given targets. The Makefile
# installs every other missing Debian package itself.
set -eu
cd "$(dirname "$0")/.."
if ! command -v make >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "make is missing; install it with: sudo apt-get install make" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends make >/dev/null
fi
exec make "$@"
