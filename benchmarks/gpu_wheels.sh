#!/usr/bin/env bash
# The wheels benchmarks/gpu_real.py needs beside a GPU machine's own packages (python3 3.12 with
# torch 2.11, transformers 5.17, lightning 2.6.6, peft, accelerate, tokenizers 0.23, no network):
# our transformers pin (>= 5.19) and what its version check and imports need, our other imports
# (jsonargparse), and the reference (comlrl 1.4.3, its datasets; its wandb import is stubbed by the
# script). Downloads them into DEST (default /work/main/.whl), one version of each, ~30 MB.
#   bash benchmarks/gpu_wheels.sh [DEST]
set -euo pipefail
DEST=${1:-/work/main/.whl}
mkdir -p "$DEST"
WHEELS=(
  transformers==5.25.0 huggingface_hub==2.4.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5
  idna==3.20 anyio==4.16.0 h11==0.16.0 click==8.5.1 hf_xet==1.8.0 regex==2026.11.19
  typing_extensions==4.16.0 peft==0.21.2 jsonargparse==4.53.0 docstring_parser==0.18.0
  typeshed_client==2.15.0 lightning==2.6.6 lightning_utilities==0.15.3 comlrl==1.4.3 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
)
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" "${WHEELS[@]}"
du -sh "$DEST"
