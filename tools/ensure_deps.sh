#!/usr/bin/env bash
# Installs the system packages the course builds with, but only those that are missing.
# make run / test / check / bench / sanitize call it before they configure; make deps calls it
# with --all (apt-get install of the whole list, which apt makes a no-op for what is current).
#
#   tools/ensure_deps.sh [--all]
#
# Debian/Ubuntu: asks dpkg which of the packages below are not installed; with none missing it
# prints nothing and exits at once (a few tens of ms). Otherwise it says in one line what it
# installs and why, then runs apt-get update + install, non-interactive, through sudo when not
# root. Without apt-get (Fedora, Arch, a conda toolchain, ...) it names what the build needs and
# exits 0: CMake's own checks then say precisely what is still absent.
# COURSE_NO_DEPS=1 (or make ... NO_DEPS=1) skips all of this, for machines whose libraries come
# from elsewhere. The CUDA toolkit and the NVIDIA driver are never touched: see docs/setup.md.
set -euo pipefail

# Debian 12 / Ubuntu 22.04 / Ubuntu 24.04 names, and what each one is for.
packages=(build-essential cmake ninja-build catch2 libcli11-dev libopencv-dev libbenchmark-dev
          libstb-dev python3)
purpose="compilers and CMake, Catch2 (tests), CLI11 (command lines), OpenCV (the image lessons' oracle), Google Benchmark (make bench), stb (image files)"

[ "${COURSE_NO_DEPS:-0}" = 1 ] && exit 0

all=0
[ "${1:-}" = --all ] && all=1

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  echo "ensure_deps: no apt-get here, so nothing is installed automatically. The build needs:" \
       "a C++17 compiler, CMake >= 3.22, Catch2 (v2 or v3), CLI11, OpenCV (core, imgproc, dnn)," \
       "stb (stb_image.h), Google Benchmark (optional) and python3; install them with your" \
       "package manager, then run make again (COURSE_NO_DEPS=1 silences this line)." >&2
  exit 0
fi

missing=()
if [ "$all" = 1 ]; then
  missing=("${packages[@]}")
else
  for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in *" installed") ;; *) missing+=("$p") ;; esac
  done
fi
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "ensure_deps: missing packages ${missing[*]}, and you are not root and have no sudo:" \
         "ask an administrator to run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi

if [ "$all" = 1 ]; then
  echo "ensure_deps: installing ${missing[*]} with apt-get${sudo:+ (through sudo)}: $purpose"
else
  echo "ensure_deps: installing the missing packages ${missing[*]} with apt-get${sudo:+ (through sudo)}: the build needs $purpose"
fi
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
