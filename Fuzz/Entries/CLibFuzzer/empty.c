// Declarations only; libFuzzer (linked by -sanitize=fuzzer) defines them.
