#!/usr/bin/env bash
# Installs every system dependency of shardgraph from Debian packages, and the `openai` Python
# client from PyPI (Debian 12 has no package of it), for driving an HTTP server from tests.
# Idempotent: packages already present are left alone, so a second run is a no-op.
set -euo pipefail

packages=(
  cmake g++ make ccache python3 clang-19 libclang-rt-19-dev
  libeigen3-dev librange-v3-dev catch2
  libpcre2-dev
  libcpp-httplib-dev
  python3-pip
  libstb-dev
  libtrilinos-kokkos-dev
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "shardgraph: install_deps: all ${#packages[@]} packages already installed"
else
  echo "shardgraph: install_deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The OpenAI client, from PyPI (Debian 12 has no package of it).
openai_spec="openai>=1,<4"
if python3 -c "import openai" 2>/dev/null; then
  echo "shardgraph: install_deps: python package openai already installed"
else
  echo "shardgraph: install_deps: installing python package ${openai_spec}"
  $sudo python3 -m pip install --quiet --break-system-packages "${openai_spec}"
fi
