#!/usr/bin/env bash
# Installs the system packages the course builds with, but only those that are missing.
# make run / test / check / bench / sanitize call it before they configure; make deps calls it
# with --all (apt-get install of the whole list, which apt makes a no-op for what is current).
#
#   tools/ensure_deps.sh [--all]
#
# Debian/Ubuntu: one dpkg-query says which packages below are not installed; a tool that is on
# the PATH already (a pip or Kitware CMake, a pip ninja, a compiler from elsewhere) counts as
# present whatever dpkg says. With nothing missing it prints nothing and exits at once (a few
# tens of ms). Otherwise it says in one line what it installs and why, then runs apt-get update +
# install, non-interactive, through sudo when not root. If that fails (no network, no sudo, a
# package your sources do not have) it says so in one line and stops the build, unless only
# optional packages (ninja-build, libbenchmark-dev) were missing.
# Without apt-get (Fedora, Arch, a conda toolchain, ...) it names what the build needs, once,
# before the first configure, and exits 0: CMake's own checks then say what is still absent.
# COURSE_NO_DEPS=1 (or make ... NO_DEPS=1) skips all of this, for machines whose libraries come
# from elsewhere. The CUDA toolkit and the NVIDIA driver are never touched: see docs/setup.md.
# COURSE_BUILD_DIR (the Makefile passes BUILD) only decides whether the no-apt note is shown.
set -euo pipefail

[ "${COURSE_NO_DEPS:-0}" = 1 ] && exit 0

# The same names on Debian 12, Ubuntu 22.04 and Ubuntu 24.04 (on Ubuntu, catch2, libcli11-dev
# and libstb-dev are in "universe"). Each with the command that, when on the PATH, stands in for
# it ("-" for libraries: dpkg decides) and whether the build needs it.
#   package           command  needed   for
table="
build-essential   g++      required compilers
cmake             cmake    required CMake
catch2            -        required Catch2 (the tests)
libcli11-dev      -        required CLI11 (the lesson binaries' command lines)
libopencv-dev     -        required OpenCV (the image lessons' CPU oracle)
libstb-dev        -        required stb (image files)
ninja-build       ninja    optional Ninja (faster builds)
libbenchmark-dev  -        optional Google Benchmark (make bench)
"
# make deps also installs these (tools/*.py: benchmark reports and charts); make test does not
# need them.
extra_all=(python3)

all=0
[ "${1:-}" = --all ] && all=1

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  if [ "$all" = 1 ] || [ ! -f "${COURSE_BUILD_DIR:-build}/CMakeCache.txt" ]; then
    echo "ensure_deps: no apt-get here, so nothing is installed automatically. The build needs:" \
         "a C++17 compiler, CMake >= 3.22, Catch2 (v2 or v3), CLI11 2.1+, OpenCV 4.2+ (core," \
         "imgproc, dnn), stb (stb_image.h), and optionally Ninja and Google Benchmark; install" \
         "them with your package manager (COURSE_NO_DEPS=1 silences this line)." >&2
  fi
  [ "$all" = 1 ] && exit 1
  exit 0
fi

packages=() ; commands=() ; kinds=() ; purposes=()
while read -r p c k what; do
  [ -n "$p" ] || continue
  packages+=("$p"); commands+=("$c"); kinds+=("$k"); purposes+=("$what")
done <<< "$table"

missing=() ; why=() ; required_missing=0
if [ "$all" = 1 ]; then
  missing=("${packages[@]}" "${extra_all[@]}")
  why=("everything the course builds with, and python3 for tools/ (make deps)")
  required_missing=1
else
  # One dpkg-query for all of them: "name status" per line, nothing for an unknown package.
  installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null |
              awk '$NF == "installed" { print $1 }' || true)
  for i in "${!packages[@]}"; do
    p=${packages[$i]}
    grep -qxF "$p" <<< "$installed" && continue
    [ "${commands[$i]}" != - ] && command -v "${commands[$i]}" >/dev/null 2>&1 && continue
    missing+=("$p"); why+=("${purposes[$i]}")
    [ "${kinds[$i]}" = required ] && required_missing=1
  done
fi
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "ensure_deps: missing packages ${missing[*]}, and you are neither root nor have sudo:" \
         "ask an administrator to run: apt-get install ${missing[*]}" \
         "(or, if your libraries come from elsewhere, run make with NO_DEPS=1)" >&2
    [ "$required_missing" = 1 ] && exit 1
    exit 0
  fi
  sudo=(sudo)
fi

IFS=';'; reasons="${why[*]}"; unset IFS
if [ "$all" = 1 ]; then
  echo "ensure_deps: installing ${missing[*]} with apt-get${sudo:+ (through sudo)}: ${reasons}"
else
  echo "ensure_deps: installing the missing ${missing[*]} with apt-get${sudo:+ (through sudo)}: the build needs ${reasons//;/, }"
fi
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=120)
# An update that cannot reach a mirror only warns (apt keeps the old lists); the install below is
# what decides.
"${apt[@]}" update || true
if ! "${apt[@]}" install -y --no-install-recommends "${missing[@]}"; then
  echo "ensure_deps: apt-get could not install ${missing[*]} (see apt's message above: no network," \
       "no sudo rights, or a package your sources lack; on Ubuntu enable \"universe\"). Install" \
       "them yourself, or run make with NO_DEPS=1 if your libraries come from elsewhere." >&2
  [ "$required_missing" = 1 ] && exit 1
  echo "ensure_deps: only optional packages were missing; the build goes on without them." >&2
fi
