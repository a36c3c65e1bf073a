"""The model before it loads: its shape, size and dtype from its config, its files checked, which weights a run used,
the built-in tiny model, and the GGUF export for llama.cpp."""
