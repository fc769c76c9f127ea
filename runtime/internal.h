/*
 * runtime/internal.h - the runtime's view of the base layer (base/base.h: errors, environment
 * parsing, small utilities). Kept so that runtime files include one name. Not installed.
 */
#ifndef SK_INTERNAL_H
#define SK_INTERNAL_H

#include "base.h"

#endif /* SK_INTERNAL_H */
