// SPDX-License-Identifier: MIT
// On/off environment switches (see env_switch.h): set to anything but "" or "0" is on.
#include "core/env_switch.h"

#include <stdlib.h>
#include <string.h>

bool mx_env_switch(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}
