# Shared by scripts/demo and scripts/test: find a Python and make a virtualenv with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# find_python MINOR: print a Python 3.MINOR-or-newer interpreter ($PYTHON first), or fail.
find_python() {
  local minor=$1 candidate version
  local candidates=("${PYTHON:-}" python3.14 python3.13 python3.12 python3.11 python3)
  if command -v pyenv >/dev/null 2>&1; then
    for version in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.[0-9]+\.[0-9]+$' | sort -rV); do
      candidates+=("$(pyenv root)/versions/$version/bin/python")
    done
  fi
  for candidate in "${candidates[@]}"; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c "import sys; sys.exit(sys.version_info < (3, $minor))" >/dev/null 2>&1; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

# make_venv PYTHON DIR NAMES: create DIR with PYTHON, install the project with NAMES (comma-
# separated: each a [dependency-groups] entry of pyproject.toml, such as test or bench, or
# else an extra, such as embedded), again only when pyproject.toml changed; set PY.
make_venv() {
  local python=$1 dir=$2 names=$3
  [ -x "$dir/bin/python" ] || "$python" -m venv "$dir"
  local stamp="$dir/.installed-$names"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    "$dir/bin/python" -m pip install --quiet --upgrade pip  # 25.1+: --group
    local args
    args=$("$dir/bin/python" - "$names" <<'PYTHON'
import sys, tomllib
groups = tomllib.load(open("pyproject.toml", "rb")).get("dependency-groups", {})
names = [name for name in sys.argv[1].split(",") if name]
extras = ",".join(name for name in names if name not in groups)
print(f"-e .[{extras}]" if extras else "-e .",
      *(f"--group {name}" for name in names if name in groups))
PYTHON
)
    # shellcheck disable=SC2086 - $args is words: -e .[x] --group y
    "$dir/bin/python" -m pip install --quiet $args
    touch "$stamp"
  fi
  PY="$dir/bin/python"
}

PYTHON_BIN=$(find_python 11) || {
  echo "django-taskrunner needs Python 3.11 or newer (set PYTHON=/path/to/python3)" >&2
  exit 1
}
