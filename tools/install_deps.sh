#!/usr/bin/env bash
# Installs every system dependency of shardgraph from Debian packages.
# Idempotent: packages already present are left alone, so a second run is a no-op.
set -euo pipefail

packages=(
  cmake g++ make ccache python3 clang-19 libclang-rt-19-dev
  libeigen3-dev librange-v3-dev catch2
  libpcre2-dev
  libstb-dev
  libtrilinos-kokkos-dev
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "shardgraph: install_deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "shardgraph: install_deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
