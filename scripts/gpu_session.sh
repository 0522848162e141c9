#!/usr/bin/env bash
# One lent GPU machine's session in one call (issue 48): the GPU acceptance run, then the test suite,
# everything kept under OUT (at most a few files: the device tool brings back 8).
#
#   scripts/gpu_session.sh OUT [SECONDS]
#
# The machine has torch, torchvision, Lightning and pytest but not textual or loaderdoc's other
# pure-Python needs and cannot fetch: they travel as wheels in .whl/ (ignored by git; see
# /work/.library/device/README.md). loaderdoc runs from src/ through PYTHONPATH, so nothing is built.
# The acceptance run goes first (its timings on an otherwise idle machine); the suite gets what is
# left of SECONDS (default 560), the test files most likely to meet CUDA first, with -v so a
# suite stopped at the limit still names every test it finished.
set -u
out=${1:?usage: scripts/gpu_session.sh OUT [SECONDS]}
total=${2:-560}
started=$(date +%s)
cd "$(dirname "$0")/.."

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "gpu_session: the wheels in .whl/ did not install" >&2; exit 2; }
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1

{
  nvidia-smi
  nproc
  python3 -c "import sys, torch, torchvision; print(sys.version); print(torch.__version__, torchvision.__version__, torch.cuda.get_device_name())"
  python3 -m pip list 2>/dev/null | grep -iE "^(torch|torchvision|lightning|pytorch-lightning|transformers|accelerate|pytest|numpy|pillow) "
} >"$out/machine.txt" 2>&1

timeout -k 10 400 python3 benchmarks/gpu_acceptance.py --out /tmp/acceptance >"$out/acceptance.txt" 2>&1
echo "gpu_acceptance exit $?" >>"$out/acceptance.txt"
tar czf "$out/acceptance.tgz" -C /tmp acceptance

first=(tests/test_probe_cuda_fork.py tests/test_probe_consumer.py tests/test_probe_threads.py
       tests/test_real_torchvision.py tests/test_gpu_acceptance.py tests/test_watch_hook.py
       tests/test_probe_runner.py tests/test_probe_cli.py tests/test_probe_model.py tests/test_watch_frameworks.py
       tests/test_watch_threads.py tests/test_torch_threads.py tests/test_faults_probe.py tests/test_tune_faults.py)
plugins=(-p xdist.plugin -p xdist.looponfail -p pytest_asyncio.plugin -p syrupy -p pytest_textual_snapshot -p no:cacheprovider)
# two runs: pytest given a file and its folder collects the file alone
rest=(tests); for f in "${first[@]}"; do rest+=(--ignore "$f"); done
: >"$out/pytest.txt"
for run in first rest; do
  left=$(( total - ($(date +%s) - started) - 15 ))
  [ "$left" -gt 20 ] || { echo "suite: no time left for the $run run" >>"$out/pytest.txt"; break; }
  echo "== suite, $run run: ${left} s left" >>"$out/pytest.txt"
  if [ $run = first ]; then args=("${first[@]}"); else args=("${rest[@]}"); fi
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout -k 5 "$left" python3 -m pytest "${plugins[@]}" -n 15 -v -rfE "${args[@]}" \
    >>"$out/pytest.txt" 2>&1
  echo "
== pytest exit $?" >>"$out/pytest.txt"
done
