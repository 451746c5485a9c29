#pragma once
#include <sqlite3.h>

/// SQLITE_STATIC is a cast macro that does not import into Swift.
static inline sqlite3_destructor_type csqlite_static(void) { return SQLITE_STATIC; }
