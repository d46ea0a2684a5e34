#!/usr/bin/env bash
# The outputs issue 15's acceptance asks for, before and after: the text output at 80 columns for one
# vLLM and one PyTorch fixture, and `fit` for Llama-3.1-8B on an A10G and on an H100.
#   tools/show_output.sh [OOMDOCTOR]     (default: oomdoctor on PATH)
# Before ada9a8d `fit` took the model differently; adapt that line by hand there.
# For "before", point it at an install of a commit before issue 15 (e.g. ada9a8d):
#   git worktree add /tmp/before ada9a8d && python -m venv /tmp/vb && /tmp/vb/bin/pip install -q -e /tmp/before
#   tools/show_output.sh /tmp/vb/bin/oomdoctor
set -u
bin=${1:-oomdoctor}
cd "$(dirname "$0")/.." || exit 2
export COLUMNS=80
for log in fixtures/vllm/synthetic-v1-worker-failed-profiling.log fixtures/pytorch/other-013.log; do
    echo "### $bin $log  (COLUMNS=80)"
    "$bin" "$log" || true
    echo
done
for gpu in A10G H100; do
    echo "### $bin fit --model meta-llama/Llama-3.1-8B --gpu $gpu  (COLUMNS=80)"
    "$bin" fit --model meta-llama/Llama-3.1-8B --gpu "$gpu" || true
    echo
done
