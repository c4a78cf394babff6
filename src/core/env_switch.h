// SPDX-License-Identifier: MIT
// The project's one reading of an on/off environment switch (MLXCEL_GPU_NO_MMA, MLXCEL_CPU_PROFILE,
// MLXCEL_CHAT_DEBUG, ...): on when set to anything but "" or "0"; unset, empty and "0" are off.
// mx_env_switch_default: the same for a switch whose unset (or empty) value is `unset`.
#ifndef MX_CORE_ENV_SWITCH_H
#define MX_CORE_ENV_SWITCH_H

#include <stdbool.h>

bool mx_env_switch(const char *name);
bool mx_env_switch_default(const char *name, bool unset);

#endif
