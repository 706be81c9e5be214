# Shared by scripts/demo and scripts/test: find Python >= 3.11 and make .venv with it.
# Usage: source scripts/_venv.sh EXTRAS   (e.g. "embedded" or "test")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

find_python() {
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "django-taskrunner needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  "$(find_python)" -m venv "$VENV"
fi
# Reinstall only when pyproject.toml changed since the last install.
stamp="$VENV/.installed-$1"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e ".[$1]"
  touch "$stamp"
fi
PY="$VENV/bin/python"
