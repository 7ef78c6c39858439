#!/usr/bin/env bash
# Follow the README as a new user does, and time it: a clean clone of this checkout, its set-up command
# (`./scripts/serve`, which creates .venv and installs everything), then the "Try it" and "Trained samplers" bash
# blocks pasted as they are (the service on localhost:8000, as the README says). Prints the seconds from the clone
# to a ready service and to 10,000 posterior draws on disk. Needs port 8000 free.
#   benchmarks/readme_walkthrough.sh            (PIP_NO_CACHE_DIR=1 in the environment: no pip cache)
set -euo pipefail
source_repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/parvis-readme-XXXXXX)
trap 'pkill -f "app.cli serve --port 8000" 2>/dev/null || true; pkill -f "$work" 2>/dev/null || true' EXIT
start=$(date +%s.%N)
git clone -q "$source_repo" "$work/parvis" && cd "$work/parvis"
block() {  # the first bash block of a README section, verbatim
  python3 - "$1" <<'PY'
import re, sys
text = open("README.md").read()
section = text.split(f"\n## {sys.argv[1]}\n", 1)[1].split("\n## ", 1)[0]
print(re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0])
PY
}
block "Try it" > try.sh
block "Trained samplers: fresh posterior draws on demand" > samplers.sh
(./scripts/serve > "$work/serve.log" 2>&1 &)
until curl -sf localhost:8000/v1/health/ready > /dev/null 2>&1; do sleep 1; done
ready=$(date +%s.%N)
bash -e try.sh > "$work/try.out" 2>&1
bash -e samplers.sh > "$work/samplers.out" 2>&1
finished=$(date +%s.%N)
.venv/bin/python -c "import numpy as np; a = np.load('/tmp/draws.npy'); print('draws', a.shape, 'mean', a.mean(0).round(3))"
python3 -c "print(f'clone to ready service: {$ready - $start:.0f} s; clone to 10,000 draws: {$finished - $start:.0f} s')"
