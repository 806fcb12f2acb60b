#!/bin/sh
# tools/venv.sh PYTHON VENV: make VENV with the interpreter `make` runs (decision 0043),
# unless it was made with that one already (VENV/.interpreter records it).
#
# PYTHON empty: tools/choose_python.py chooses (an optimised CPython >= 3.11 where one is
# installed); else PYTHON, as given to make. Prints the choice and why in one line. A VENV
# made by another interpreter, or with no record, is removed and made again (the record's
# mtime then changes, and the Makefile installs everything again). Debian's python3.X-venv
# (ensurepip), python3.X-dev (Python.h) and gcc are installed when missing, through sudo
# unless root; when that fails the install goes on (the compiled build falls back to pure
# Python, setup.py).
set -eu
python=$1
venv=$2
record=$venv/.interpreter
here=$(dirname "$0")

if [ -n "$python" ]; then
	py=$python
	why="PYTHON=$python given to make"
else
	choice=$(python3 "$here/choose_python.py")
	py=$(printf '%s\n' "$choice" | cut -f1)
	why=$(printf '%s\n' "$choice" | cut -f2)
fi
real=$("$py" -c 'import os, sys; print(os.path.realpath(sys.executable))')
echo "interpreter: $real, $why"

missing=""
if dpkg -S "$real" >/dev/null 2>&1; then
	ver=$("$real" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	"$real" -c 'import ensurepip' 2>/dev/null || missing="$missing python$ver-venv"
	"$real" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
		|| missing="$missing python$ver-dev"
fi
command -v gcc >/dev/null || missing="$missing gcc"
if [ -n "$missing" ]; then
	echo "installing Debian packages:$missing"
	SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
	{ $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null; } \
		|| echo "could not install$missing: the compiled build falls back to pure Python"
fi

if [ -x "$venv/bin/python" ] && [ "$(cat "$record" 2>/dev/null)" = "$real" ]; then
	exit 0
fi
if [ -d "$venv" ]; then
	echo "making $venv again: it was made by $(cat "$record" 2>/dev/null || echo an interpreter not recorded)"
fi
rm -rf "$venv"
"$real" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
echo "$real" > "$record"
