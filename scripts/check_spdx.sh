#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every source file carries an SPDX license identifier in its first lines. Checks the files git
# tracks plus untracked, not-ignored ones (so a new file fails before it is committed), of kinds
# *.c *.h *.cu *.cuh *.cmake CMakeLists.txt *.sh *.py *.js, skipping fixtures and bundled model data.
# Prints each offender and exits 1 when there is any. Usage: scripts/check_spdx.sh [repo root]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list() { git ls-files -z --cached --others --exclude-standard; }
else
    # No git (a source tarball): skip build output, dependencies and hidden folders.
    list() {
        find . \( -path ./build -o -name node_modules -o -name '.?*' -o -name '__pycache__' \) -prune -o -type f -print0 |
            sed -z 's|^\./||'
    }
fi
bad=0
checked=0
while IFS= read -r -d '' f; do
    case "$f" in
    tests/fixtures/* | models/*) continue ;;
    *.c | *.h | *.cu | *.cuh | *.cmake | *CMakeLists.txt | *.sh | *.py | *.js | .ci/run) ;;
    *) continue ;;
    esac
    [ -f "$f" ] || continue
    checked=$((checked + 1))
    if ! head -n 5 "$f" | grep -q 'SPDX-License-Identifier: [A-Za-z0-9.+-]'; then
        echo "missing SPDX-License-Identifier: $f"
        bad=$((bad + 1))
    fi
done < <(list)
if [ "$bad" -gt 0 ]; then
    echo "$bad of $checked source files lack an SPDX header (add e.g. '// SPDX-License-Identifier: MIT' as the first line)"
    exit 1
fi
echo "all $checked source files carry an SPDX header"
