# llama-cpp-fast.cmake - included by tools/llama-cpp after llama.cpp's
# project() (CMAKE_PROJECT_llama.cpp_INCLUDE) to cut its build time on 2 cores
# without touching the code bangtrace measures or links.
#
# llama-common (arg parsing, chat templates, JSON: ~50 C++ files, each
# parsing nlohmann/json.hpp), cpp-httplib and the server's own libraries
# (server-context, llama-server-impl, mtmd, llama-ui) exist here only because
# llama-bench, llama-quantize and llama-server link them; nothing they compute
# is timed or traced (the server's numbers come from the -O3 llama library).
# So they are compiled at -O1 and llama-common gets json.hpp as a precompiled
# header. ggml, ggml-cpu and llama keep the Release -O3 flags:
# they are the kernels llama-bench and `run --engine llama.cpp` time.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _bt_llama_cpp_fast)
function(_bt_llama_cpp_fast)
    foreach(t llama-common llama-common-base cpp-httplib server-context llama-server-impl mtmd llama-ui)
        if(TARGET ${t})
            target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
        endif()
    endforeach()
    if(TARGET llama-common)
        target_precompile_headers(llama-common PRIVATE <nlohmann/json.hpp> <string> <vector> <map>)
    endif()
endfunction()
