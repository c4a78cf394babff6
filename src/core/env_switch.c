// SPDX-License-Identifier: MIT
// On/off environment switches (see env_switch.h): set to anything but "" or "0" is on.
#include "core/env_switch.h"

#include <stdlib.h>
#include <string.h>

bool mx_env_switch(const char *name) { return mx_env_switch_default(name, false); }

bool mx_env_switch_default(const char *name, bool unset) {
    const char *v = getenv(name);
    if (!v || !*v) return unset;
    return strcmp(v, "0") != 0;
}
