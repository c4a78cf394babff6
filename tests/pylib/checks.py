# SPDX-License-Identifier: MIT
"""The pass/fail tally of the Python test scripts (tests/cli, tests/server, tests/hub): check()
prints one line per check, PASS or FAIL with the detail that explains a failure, and finish()
prints the totals and exits 1 when any check failed, which is what ctest reads."""
import sys

passed, failed = 0, 0


def check(name, ok, detail=''):
    global passed, failed
    if ok:
        passed += 1
        print(f'PASS {name}', flush=True)
    else:
        failed += 1
        print(f'FAIL {name}: {detail}', flush=True)
    return bool(ok)


def finish():
    print(f'{passed} passed, {failed} failed')
    sys.exit(1 if failed else 0)
