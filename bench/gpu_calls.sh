#!/usr/bin/env bash
# The calls a lent GPU machine runs (bench/notes/gpu_check.md, ../shared/GPU.md),
# each from the repository's root through the device tool's `run`, $OUT its folder
# of files to send back (8 at most):
#   bash bench/gpu_calls.sh 1     carry [".whl"]: Ray into /tmp/site, then the checks
#                                 that need no data (about 2 min)
#   bash bench/gpu_calls.sh 2     carry [".data"], within 30 s of call 1 (the machine
#                                 stays warm that long): the figures (about 5 min)
#   bash bench/gpu_calls.sh 3 B   carry [".data"], B = status's budget_left_s, run with
#                                 timeout_s B - 30: the rest of tests/gpu
# A machine given back between calls has lost /tmp/site: call 2 then runs the steps
# without Ray instead of nothing, and call 3 nothing.
set -u
call=${1:?which call: 1, 2, or 3 and the budget left}
out=${OUT:?the device tool sets OUT, the folder it sends back}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FASHION_MNIST_DIR=$PWD/.data/fashion-mnist
data=(--out "$out" --data-dir .data/fashion-mnist)
has_ray() { python3 -c 'import ray' 2>/dev/null; }
case $call in
1)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    || exit 3
  python3 -c "import ray; print('ray', ray.__version__)" || exit 3
  nvidia-smi -L
  # Each under a limit of its own, so that a slow one leaves the next its time; the
  # call's status says whether all three passed.
  status=0
  timeout 60 python3 bench/memory_floor.py --out "$out" --cuda-only || status=1
  timeout 60 python3 bench/ddp_clear.py --device cuda --batch-size 256 --steps 20 \
    --out "$out" || status=1
  timeout 120 python3 -m pytest tests/gpu/test_memory_floor_on_gpu.py -v -rs --timeout 60 \
    -p no:cacheprovider > "$out/tests_no_data.log" 2>&1 || status=1
  tail -3 "$out/tests_no_data.log"
  exit $status
  ;;
2)
  if ! has_ray; then
    echo "NO RAY: a fresh machine, call 1's /tmp/site gone; the steps without Ray only"
    python3 bench/gpu_check.py "${data[@]}" --steps loop_alone,torchrun
    exit 3
  fi
  nvidia-smi -L
  python3 bench/gpu_check.py "${data[@]}" \
    --steps tests_cuda_graph,main_job,d2l_13_6,loop_alone,torchrun
  ;;
3)
  budget=${2:?call 3 needs the budget left (budget_left_s of the device status)}
  budget=${budget%.*}  # whole seconds
  if (( budget < 240 )); then
    echo "${budget} s of device time left, under 240: call 3 skipped (give the machine back)"
    exit 0
  fi
  has_ray || { echo "NO RAY: a fresh machine, call 1's /tmp/site gone; nothing run"; exit 3; }
  # The check stops its step and writes its record 90 s before the device time ends.
  python3 bench/gpu_check.py "${data[@]}" --steps tests_gpu --budget-s $((budget - 90))
  ;;
*)
  echo "bench/gpu_calls.sh: call 1, 2 or 3, not $call" >&2
  exit 2
  ;;
esac
