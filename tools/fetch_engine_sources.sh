#!/bin/bash
# Fetch the engines' wheels one at a time and keep only the Python sources that build their server
# argument parsers, for tools/gen_engine_args.py. Wheels are large (vLLM ~400 MB): each is deleted
# once unpacked. Usage:
#   tools/fetch_engine_sources.sh DEST        # the sampled releases below
#   python tools/gen_engine_args.py vllm DEST/vllm-* > oomdoctor/data/engine_args/vllm.json
#   python tools/gen_engine_args.py sglang DEST/sglang-* > oomdoctor/data/engine_args/sglang.json
# The samples bound the flag changes that matter for memory advice: vLLM 0.5 (V0), 0.6 (chunked
# prefill as an optional value), 0.8 (config-dataclass flags), 0.10/0.11 (--kv-cache-memory-bytes,
# V1 only), 0.14 (last with --swap-space), 0.19, 0.27 and 0.34 (newest); SGLang 0.3, 0.4 and 0.5.
set -euo pipefail
dest=${1:?usage: $0 DEST [pkg==version ...]}
shift || true
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  specs=(vllm==0.5.5 vllm==0.6.6 vllm==0.7.3 vllm==0.8.5 vllm==0.9.2 vllm==0.10.2 vllm==0.11.0 vllm==0.14.0
         vllm==0.19.1 vllm==0.27.0 vllm==0.34.0 sglang==0.3.6 sglang==0.4.6 sglang==0.5.10.post1)
fi
mkdir -p "$dest"
for spec in "${specs[@]}"; do
  pkg=${spec%%==*}; version=${spec##*==}
  out="$dest/$pkg-$version"
  [ -d "$out" ] && continue
  wheels=$(mktemp -d)
  python3 -m pip download --no-deps --only-binary :all: --python-version 3.12 \
    --platform manylinux1_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_31_x86_64 --platform any "$spec" -d "$wheels" >/dev/null
  mkdir -p "$out"
  unzip -q -o "$wheels"/*.whl "$pkg/*.py" -d "$out"
  rm -rf "$wheels"
done
