# Sourced by the scripts run on the lent GPU machine (scripts/profile_gpu_*.sh, scripts/gpu_reduce_overhead.sh):
# the wheels carried in .gpuwheels/ (transformers 5.25.0 and what the machine lacks: its python3 has an older
# transformers, and the version changes the op path; jsonschema and its dependencies, which profile artifacts are
# checked with) installed into /tmp/tf ahead of the machine's own packages,
# unbuffered output (a run cut short still shows what it printed), a fresh Inductor cache (no compile reused from an
# earlier call on a machine that stayed warm), and one line naming what ran.
if [ -d .gpuwheels ]; then
  python3 -m pip install -q --upgrade --no-deps --no-compile --target /tmp/tf .gpuwheels/*.whl && export PYTHONPATH=/tmp/tf:$PWD
fi
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=$(mktemp -d)
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
