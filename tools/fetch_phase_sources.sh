#!/bin/bash
# Fetch the releases tools/gen_phase_table.py reads, one at a time, keeping only their Python
# sources (wheels are large, vLLM ~400 MB: each is deleted once unpacked).
# Usage:
#   tools/fetch_phase_sources.sh DEST                 # the sampled releases below
#   python tools/gen_phase_table.py DEST > rules/phases.generated.toml
# DEST defaults to $OOMDOCTOR_PHASE_SOURCES, else ~/.cache/oomdoctor/phase-sources (where
# tests/test_phase_table.py looks for them). Each release lands in DEST/<package>-<version>.
# The samples: vLLM 0.4 (V0, first "Loading weights took"), 0.6, 0.8 (V1 beside V0), 0.10 (V1
# only) and the newest; SGLang 0.3, 0.4 and the newest; transformers 4.40 / 4.46 / newest, and one
# release of each training and inference framework whose stages a failure may name.
set -euo pipefail
dest=${1:-${OOMDOCTOR_PHASE_SOURCES:-$HOME/.cache/oomdoctor/phase-sources}}
shift || true
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  specs=(vllm==0.4.3 vllm==0.6.6 vllm==0.8.5 vllm==0.10.2 vllm==0.34.0
         sglang==0.3.6 sglang==0.4.6 sglang==0.5.10.post1
         transformers==4.40.2 transformers==4.46.3 transformers==5.25.0
         accelerate==0.30.1 accelerate==1.16.0
         diffusers==0.42.1 lightning==2.6.6 trl==0.9.6 trl==1.16.0 peft==0.21.2
         torchtune==0.6.1 flax==0.12.8 keras==3.15.1 faster-whisper==1.2.1 uvicorn==0.55.0
         deepspeed==0.19.8 llama-cpp-python==0.2.90 monai==1.5.1 ms-swift==3.4.1 ms-swift==4.6.0 ai-models==0.7.4
         bitsandbytes==0.43.1 bitsandbytes==0.50.2 openrlhf==0.5.7 openrlhf==0.11.2
         amd-quark==0.6.0 amd-quark==0.13)
fi
mkdir -p "$dest"
for spec in "${specs[@]}"; do
  pkg=${spec%%==*}; version=${spec##*==}
  out="$dest/$pkg-$version"
  [ -d "$out" ] && continue
  mod=${pkg//-/_}
  case "$pkg" in  # (the module a distribution installs, where its name differs)
    ms-swift) mod=swift ;;
    llama-cpp-python) mod=llama_cpp ;;
    amd-quark) mod=quark ;;
  esac
  wheels=$(mktemp -d)
  # (older releases have wheels for older Pythons only)
  for py in 3.12 3.11 3.10; do
    python3 -m pip download -q --no-deps --only-binary :all: --python-version $py \
      --platform manylinux1_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform any "$spec" -d "$wheels" 2>/dev/null && break
  done
  # DeepSpeed and llama-cpp-python publish no wheel on PyPI: their sdist holds the same sources
  if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
    python3 -m pip download -q --no-deps --no-binary :all: "$spec" -d "$wheels" 2>/dev/null || true
  fi
  # (either kind will do: `ls A B` fails when one of its globs matches nothing)
  if ! compgen -G "$wheels/*.whl" >/dev/null && ! compgen -G "$wheels/*.tar.gz" >/dev/null; then
    echo "no wheel or sdist for $spec: skipped" >&2; rm -rf "$wheels"; continue
  fi
  mkdir -p "$out.part"
  for f in "$wheels"/*; do
    case "$f" in
      *.whl) unzip -q -o "$f" "*.py" -d "$out.part"
             # (a wheel that installs its modules as data: openrlhf's NAME.data/purelib/)
             for d in "$out.part"/*.data/purelib; do [ -d "$d" ] && cp -r "$d"/. "$out.part"/ && rm -rf "${d%/purelib}"; done ;;
      *.tar.gz) tar -xzf "$f" -C "$out.part" --strip-components=1 --wildcards "*/$mod/*.py" ;;
    esac
  done
  # keep the package's own modules (a wheel of lightning also holds lightning_fabric, ...)
  find "$out.part" -mindepth 1 -maxdepth 1 -type d ! -name "$mod*" ! -name "pytorch_lightning" ! -name "lightning_fabric" -exec rm -rf {} +
  mv "$out.part" "$out"
  rm -rf "$wheels"
done
# llama.cpp: the release node-llama-cpp bundles (llama/gitRelease.bundle, tag in
# llama/binariesGithubRelease.json), C++ sources of src/ only, as DEST/llama.cpp-<tag>
# (node-llama-cpp 3.1.1 -> b3889, 3.10.0 -> b5640, 3.22.1 -> the newest)
for nlc in ${NODE_LLAMA_CPP:-3.1.1 3.10.0 3.22.1}; do
  work=$(mktemp -d)
  (cd "$work" && npm pack -q "node-llama-cpp@$nlc" >/dev/null 2>&1)
  tar -xzf "$work"/node-llama-cpp-*.tgz -C "$work" package/llama/binariesGithubRelease.json package/llama/gitRelease.bundle
  tag=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["release"])' "$work/package/llama/binariesGithubRelease.json")
  out="$dest/llama.cpp-$tag"
  if [ ! -d "$out" ]; then
    git clone -q "$work/package/llama/gitRelease.bundle" "$work/src" 2>/dev/null
    mkdir -p "$out.part/src"
    cp "$work"/src/src/*.cpp "$out.part/src/"
    echo "$nlc" > "$out.part/node-llama-cpp-version"
    mv "$out.part" "$out"
  fi
  rm -rf "$work"
done
# ComfyUI (not on PyPI): its repository at the commits of two releases, Python sources only, as
# DEST/comfyui-<version>/ComfyUI/ (the folder a user's paths name). COMFYUI_GIT: a local clone or
# mirror of https://github.com/comfyanonymous/ComfyUI to read instead of the network.
comfy_git=${COMFYUI_GIT:-https://github.com/comfyanonymous/ComfyUI}
for pin in ${COMFYUI_RELEASES:-0.3.26=9aac21f8 0.3.64=a125cd84}; do
  version=${pin%%=*}; commit=${pin##*=}
  out="$dest/comfyui-$version"
  [ -d "$out" ] && continue
  work=$(mktemp -d)
  if [ -d "$comfy_git" ]; then src=$comfy_git; else git clone -q --bare --filter=blob:none "$comfy_git" "$work/repo"; src=$work/repo; fi
  mkdir -p "$out.part/ComfyUI"
  # (the .py files by name: a mirror may lack large blobs, which a '*.py' pathspec still reads)
  git -C "$src" ls-tree -r -z --name-only "$commit" | grep -z '\.py$' | xargs -0 git -C "$src" archive "$commit" -- \
    | tar -x -C "$out.part/ComfyUI"
  mv "$out.part" "$out"
  rm -rf "$work"
done
