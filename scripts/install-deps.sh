#!/usr/bin/env bash
# Installs every build and runtime dependency of pldr from Debian 12 packages (nothing else).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev     # BLAS with the OpenMP threading model (does not fight our OpenMP pool)
  libsentencepiece-dev sentencepiece
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libpng-dev zlib1g-dev
  libcpp-httplib-dev         # pldr serve (HTTP server)
  libsleef-dev               # torch's float32 cos/sin (the reference's RoPE table)
  libdnnl-dev                # oneDNN: bf16 products (AVX512-BF16 / AMX) and large float32 ones (src/core/onednn.cpp)
  clang-format
  pybind11-dev python3-dev python3-numpy python3-pytest   # the Python module (docs/python.md)
  libopenmpi-dev openmpi-bin  # data-parallel training (PLDR_MPI, docs/distributed.md)
  iproute2                    # ip netns: the two-host test (tests/dist_two_hosts.sh)
  clang libclang-rt-14-dev libomp-dev   # the libFuzzer targets (scripts/fuzz.sh, fuzz/README.md)
)
if [ "${PLDR_WITH_BROWSER:-0}" = "1" ]; then PKGS+=(chromium python3-websocket); fi  # the page test (tests/serve/page_test.py)
# Optional: PyTorch, for the Python test that compares model.forward with a PyTorch
# re-implementation (python/tests/test_torch_reference.py; skipped without it). Large.
if [ "${PLDR_WITH_TORCH:-0}" = "1" ]; then PKGS+=(python3-torch); fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all ${#PKGS[@]} packages present"
