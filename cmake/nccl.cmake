# SPDX-License-Identifier: Apache-2.0
# The NCCL transport (include/flashindexer/nccl.h), optional: AUTO builds it whenever the CUDA
# backend is on and the NCCL headers are found; ON requires them; OFF leaves it out (its functions
# then answer kUnsupported). Only the header is needed to build: the library is loaded at run time
# (dlopen of libnccl.so.2, src/multigpu/nccl_library.cpp), first by soname, then from the path found
# here. Nothing else in the library sees NCCL: the definitions and include path are set on the
# two transport sources only.
#
# Where NCCL is looked for, in order: NCCL_ROOT (cache variable or environment), NCCL_HOME, the
# PyPI wheel nvidia-nccl-cu13 (or -cu12) in the site-packages of the Python found on PATH or given
# as Python_EXECUTABLE / Python3_EXECUTABLE (it installs nvidia/nccl/{include,lib}; some CUDA 13
# wheels use nvidia/cu13/), then the system paths (libnccl-dev: /usr/include/nccl.h).
set(FLASHINDEXER_NCCL AUTO CACHE STRING "Build the NCCL transport: AUTO, ON or OFF")
set(NCCL_ROOT "" CACHE PATH "An NCCL installation holding include/nccl.h and lib/libnccl.so.2")

set(FLASHINDEXER_WITH_NCCL OFF)
if(NOT FLASHINDEXER_NCCL STREQUAL "OFF")
  if(NOT FLASHINDEXER_WITH_CUDA)
    if(FLASHINDEXER_NCCL STREQUAL "ON")
      message(FATAL_ERROR "FLASHINDEXER_NCCL=ON needs the CUDA backend (FLASHINDEXER_CUDA)")
    endif()
  else()
    set(_fi_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
    set(_fi_nccl_pythons ${Python_EXECUTABLE} ${Python3_EXECUTABLE})
    find_program(_fi_nccl_python NAMES python3 python)
    if(_fi_nccl_python)
      list(APPEND _fi_nccl_pythons ${_fi_nccl_python})
    endif()
    # The folders of the 'nvidia' namespace package (one per site-packages that has one).
    set(_fi_nvidia_query [=[
import importlib.util as u
s = u.find_spec('nvidia')
print('\n'.join(s.submodule_search_locations) if s else '')
]=])
    foreach(_fi_python IN LISTS _fi_nccl_pythons)
      execute_process(
        COMMAND "${_fi_python}" -c "${_fi_nvidia_query}"
        OUTPUT_VARIABLE _fi_nvidia_dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
        RESULT_VARIABLE _fi_python_result)
      if(_fi_python_result EQUAL 0)
        string(REPLACE "\n" ";" _fi_nvidia_dirs "${_fi_nvidia_dirs}")
        foreach(_fi_dir IN LISTS _fi_nvidia_dirs)
          list(APPEND _fi_nccl_hints "${_fi_dir}/nccl" "${_fi_dir}/cu13")
        endforeach()
      endif()
    endforeach()
    find_path(FLASHINDEXER_NCCL_INCLUDE_DIR nccl.h HINTS ${_fi_nccl_hints} PATH_SUFFIXES include)
    find_library(FLASHINDEXER_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
      HINTS ${_fi_nccl_hints}
      PATH_SUFFIXES lib lib64)
    if(FLASHINDEXER_NCCL_INCLUDE_DIR)
      set(FLASHINDEXER_WITH_NCCL ON)
      set(_fi_nccl_definitions FLASHINDEXER_WITH_NCCL=1)
      if(FLASHINDEXER_NCCL_LIBRARY)
        list(APPEND _fi_nccl_definitions
          "FLASHINDEXER_NCCL_LIBRARY_PATH=\"${FLASHINDEXER_NCCL_LIBRARY}\"")
      endif()
      set_source_files_properties(src/multigpu/nccl_library.cpp src/api/nccl.cpp
        PROPERTIES COMPILE_DEFINITIONS "${_fi_nccl_definitions}"
                   INCLUDE_DIRECTORIES "${FLASHINDEXER_NCCL_INCLUDE_DIR}")
      target_link_libraries(flashindexer PRIVATE ${CMAKE_DL_LIBS})
      message(STATUS "NCCL transport: on (${FLASHINDEXER_NCCL_INCLUDE_DIR}/nccl.h, library "
                     "${FLASHINDEXER_NCCL_LIBRARY}, loaded at run time)")
    elseif(FLASHINDEXER_NCCL STREQUAL "ON")
      message(FATAL_ERROR "FLASHINDEXER_NCCL=ON but nccl.h was not found: pip install "
                          "nvidia-nccl-cu13, install libnccl-dev, or set NCCL_ROOT")
    endif()
  endif()
endif()
if(NOT FLASHINDEXER_WITH_NCCL)
  message(STATUS "NCCL transport: off (the functions of flashindexer/nccl.h return kUnsupported)")
endif()
