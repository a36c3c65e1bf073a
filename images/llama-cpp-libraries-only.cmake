# Included by llama.cpp's own CMakeLists.txt right after its project() call (CMAKE_PROJECT_llama.cpp_INCLUDE, set by
# hostlab/locks/sourcebuilds.py for the image and by .ci/run for the test venv). llama-cpp-python forces llama.cpp's
# `common` library on, but its Python package loads only libllama and libggml*: `common` (and cpp-httplib with it)
# was half of the compile (112 of 215 s on 2 cores) for a library installed outside the package and never loaded.
# A plain variable here shadows the forced cache entry when llama.cpp's option() reads it (policy CMP0077).
set(LLAMA_BUILD_COMMON OFF)
