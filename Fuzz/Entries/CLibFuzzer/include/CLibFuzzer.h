// libFuzzer's driver, called from each fuzz executable's `main` (SwiftPM links executables with
// `main` aliased to `<module>_main`, so libFuzzer's own `main` is not used).
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
