# SPDX-License-Identifier: Apache-2.0
# Sanitizer and fuzzing builds of the CPU code. The top-level CMakeLists.txt includes this file
# after every target is defined, so the flags below come after each target's own and the last
# -O on the command line (-O1) wins over the library's -O3.
#
# FLASHINDEXER_SANITIZE=ON: AddressSanitizer + UndefinedBehaviorSanitizer on every C++ target of
#   the project (library, CPU tests, CLI, Python module). Any UB report aborts (no recovery), so
#   a report fails the test that raised it. Registers the tests labelled `sanitize`: the whole
#   CPU GoogleTest suite as one entry, the replay of the fuzzer's seed corpus and regressions
#   (tests/fuzz/), and with FLASHINDEXER_PYTHON=ON (g++) the Python suite against the sanitized
#   module. Run them with `ctest -L sanitize`.
# FLASHINDEXER_FUZZ=ON (clang only, implies the sanitizers): the library is also built with
#   -fsanitize=fuzzer-no-link and tests/fuzz/ adds the libFuzzer target flashindexer_fuzz.
#
# CPU backend only: the CUDA sources are not built with host sanitizers.
option(FLASHINDEXER_SANITIZE "Build the CPU code with ASan + UBSan (-O1 -g)" OFF)
option(FLASHINDEXER_FUZZ "Build the libFuzzer target over the op entry points (clang)" OFF)

if(FLASHINDEXER_SANITIZE OR FLASHINDEXER_FUZZ)
  if(FLASHINDEXER_WITH_CUDA)
    message(FATAL_ERROR "FLASHINDEXER_SANITIZE/FLASHINDEXER_FUZZ need -DFLASHINDEXER_CUDA=OFF")
  endif()
  if(FLASHINDEXER_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FLASHINDEXER_FUZZ needs clang (CMAKE_CXX_COMPILER=clang++)")
  endif()
  set(FLASHINDEXER_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  set(FLASHINDEXER_SANITIZER_COMPILE_FLAGS ${FLASHINDEXER_SANITIZER_FLAGS}
    -O1 -g -fno-omit-frame-pointer)
  if(FLASHINDEXER_FUZZ)
    list(APPEND FLASHINDEXER_SANITIZER_COMPILE_FLAGS -fsanitize=fuzzer-no-link)
  endif()

  get_property(flashindexer_targets DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS flashindexer_targets)
    get_target_property(target_type ${target} TYPE)
    if(target_type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$" OR
       target_type STREQUAL "EXECUTABLE")
      target_compile_options(${target} PRIVATE
        $<$<COMPILE_LANGUAGE:CXX>:${FLASHINDEXER_SANITIZER_COMPILE_FLAGS}>)
    endif()
    if(target_type MATCHES "^(SHARED_LIBRARY|MODULE_LIBRARY|EXECUTABLE)$")
      target_link_options(${target} PRIVATE ${FLASHINDEXER_SANITIZER_FLAGS})
    endif()
  endforeach()

  # The fuzzer's entry point, replayed over every input kept in the repository by a plain main
  # (no libFuzzer needed, so any compiler's sanitizer build runs it).
  set(FLASHINDEXER_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz)
  set(FLASHINDEXER_FUZZ_SOURCES ${FLASHINDEXER_FUZZ_DIR}/op_fuzzer.cpp
    ${FLASHINDEXER_FUZZ_DIR}/fuzz_input.cpp ${FLASHINDEXER_FUZZ_DIR}/fuzz_kcache_dist.cpp)
  add_executable(flashindexer_fuzz_replay
    ${FLASHINDEXER_FUZZ_SOURCES} ${FLASHINDEXER_FUZZ_DIR}/replay_main.cpp)
  target_include_directories(flashindexer_fuzz_replay PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_compile_options(flashindexer_fuzz_replay PRIVATE -Wall -Wextra
    ${FLASHINDEXER_SANITIZER_COMPILE_FLAGS})
  target_link_options(flashindexer_fuzz_replay PRIVATE ${FLASHINDEXER_SANITIZER_FLAGS})
  target_link_libraries(flashindexer_fuzz_replay PRIVATE flashindexer)

  if(FLASHINDEXER_FUZZ)
    add_executable(flashindexer_fuzz ${FLASHINDEXER_FUZZ_SOURCES})
    target_include_directories(flashindexer_fuzz PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
    target_compile_options(flashindexer_fuzz PRIVATE -Wall -Wextra -fsanitize=fuzzer
      ${FLASHINDEXER_SANITIZER_COMPILE_FLAGS})
    target_link_options(flashindexer_fuzz PRIVATE -fsanitize=fuzzer ${FLASHINDEXER_SANITIZER_FLAGS})
    target_link_libraries(flashindexer_fuzz PRIVATE flashindexer)
  endif()

  if(FLASHINDEXER_TESTS)
    # halt_on_error with UBSan's no-recover: the first report ends the process with an error.
    set(FLASHINDEXER_SANITIZER_ENV
      "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
    add_test(NAME cpu_suite_sanitized COMMAND flashindexer_tests)
    add_test(NAME fuzz_regressions_replay COMMAND flashindexer_fuzz_replay
      ${FLASHINDEXER_FUZZ_DIR}/regressions ${FLASHINDEXER_FUZZ_DIR}/corpus)
    set_tests_properties(cpu_suite_sanitized fuzz_regressions_replay PROPERTIES
      LABELS sanitize ENVIRONMENT "${FLASHINDEXER_SANITIZER_ENV}")
    if(FLASHINDEXER_PYTHON AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      # The Python suite against the sanitized module: _C is written next to a fresh copy of the
      # package sources. The interpreter is not instrumented, so the sanitizer runtimes are
      # preloaded, and leaks are not checked (CPython keeps its objects at exit by design).
      set(FLASHINDEXER_SANITIZED_PACKAGE ${CMAKE_CURRENT_BINARY_DIR}/python-sanitized)
      set_target_properties(_C PROPERTIES
        LIBRARY_OUTPUT_DIRECTORY ${FLASHINDEXER_SANITIZED_PACKAGE}/flashindexer)
      execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
        OUTPUT_VARIABLE FLASHINDEXER_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
      execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libubsan.so
        OUTPUT_VARIABLE FLASHINDEXER_LIBUBSAN OUTPUT_STRIP_TRAILING_WHITESPACE)
      # $0: source tree, $1: the sanitized package folder, $2: the interpreter.
      set(FLASHINDEXER_COPY_AND_TEST
        "cp -R \"$0\"/python/flashindexer/. \"$1\"/flashindexer/ && "
        "exec \"$2\" -m pytest -q -p no:cacheprovider \"$0\"/tests/python")
      string(CONCAT FLASHINDEXER_COPY_AND_TEST ${FLASHINDEXER_COPY_AND_TEST})
      add_test(NAME python_suite_sanitized
        COMMAND sh -c "${FLASHINDEXER_COPY_AND_TEST}"
                ${CMAKE_CURRENT_SOURCE_DIR} ${FLASHINDEXER_SANITIZED_PACKAGE} ${Python_EXECUTABLE}
        WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
      set(FLASHINDEXER_PYTHON_SANITIZER_ENV
        "PYTHONPATH=${FLASHINDEXER_SANITIZED_PACKAGE}"
        "LD_PRELOAD=${FLASHINDEXER_LIBASAN} ${FLASHINDEXER_LIBUBSAN}"
        "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1"
        "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
      set_tests_properties(python_suite_sanitized PROPERTIES
        LABELS sanitize ENVIRONMENT "${FLASHINDEXER_PYTHON_SANITIZER_ENV}")
    endif()
  endif()
endif()
