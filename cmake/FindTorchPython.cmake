# Finds what the Python extension builds with; sets RRFP_PYTHON (ON/OFF), RRFP_PYTHON_WHY (why
# not, or which interpreter), RRFP_PYTHON_EXECUTABLE and TORCH_PYTHON_LIBRARY. The interpreter's
# torch must be the LibTorch we link (same major.minor): another one would load two libtorch.
# Also sets RRFP_TORCH_PYBIND11_DEFINES and RRFP_TORCH_PYBIND11_INCLUDE (below).
set(RRFP_PYTHON_WHY "")
# RRFP_PYTHON_EXECUTABLE, where given (setup.py gives the interpreter running pip), is the one:
# the module is built for it and named for its version, so another interpreter's (the one with
# torch found below) would be copied under its name. It is used or the configure stops, saying
# why. Only where none is given are `python3` on PATH and /usr/bin/python3 tried (Debian's
# python3-torch is in the latter's dist-packages; the PATH's may be a venv or pyenv's, without).
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _libver "${Torch_VERSION}")
if(RRFP_PYTHON_EXECUTABLE)
  set(_candidates "${RRFP_PYTHON_EXECUTABLE}")
else()
  find_program(_path_python python3 NO_CACHE)
  set(_candidates ${_path_python} /usr/bin/python3)
endif()
set(_found "")
foreach(_py IN LISTS _candidates)
  if(EXISTS "${_py}")
    execute_process(COMMAND "${_py}" -c "import torch; print(torch.__version__)"
                    RESULT_VARIABLE _rc OUTPUT_VARIABLE _ver ERROR_VARIABLE _err TIMEOUT 120)
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _ver "${_ver}")
    if(_rc EQUAL 0 AND _ver STREQUAL _libver)
      set(_found "${_py}")
      break()
    endif()
  endif()
endforeach()
if(RRFP_PYTHON_EXECUTABLE AND NOT _found)
  if(NOT EXISTS "${RRFP_PYTHON_EXECUTABLE}")
    set(_why "there is no such file")
  elseif(NOT _rc EQUAL 0)
    string(REGEX MATCH "[^\n]*Error[^\n]*" _err "${_err}")  # the exception's line
    if(NOT _err)
      set(_err "${_rc}")
    endif()
    set(_why "it cannot import torch (${_err}): give one whose torch is LibTorch's, such as \
/usr/bin/python3 with Debian's python3-torch or a venv made from it with \
--system-site-packages")
  else()
    set(_why "its torch is ${_ver}, not the LibTorch found (${Torch_VERSION} in \
${TORCH_INSTALL_PREFIX}), and the extension would load both")
  endif()
  message(FATAL_ERROR "rrfp: RRFP_PYTHON_EXECUTABLE=${RRFP_PYTHON_EXECUTABLE} cannot build the "
                      "Python extension: ${_why}")
endif()
if(NOT _found)
  set(RRFP_PYTHON_WHY "(no interpreter among ${_candidates} imports torch ${Torch_VERSION}: \
scripts/install-deps.sh installs python3-torch)")
  return()
endif()
# The one found, for this configure and the tests (not the cache, where it would read as given
# next time).
set(RRFP_PYTHON_EXECUTABLE "${_found}")
set(Python_EXECUTABLE "${_found}")
set(PYTHON_EXECUTABLE "${_found}")  # pybind11's classic search (-DPYBIND11_FINDPYTHON=OFF)
# A torch object (a ProcessGroup) crosses into the extension only if both were built with one
# pybind11 ABI: the same pybind11 internals and the same compiler, standard-library and C++ ABI
# tags. Otherwise the cast fails at run time (torch 2.11's wheel against a pip pybind11 did). So
# the extension takes torch's own pybind11 headers where torch ships them (its wheels do;
# Debian's torch does not and is built with Debian's pybind11) and the tags torch._C states
# (torch before 2.9 states them, as its extension builder passes them; from 2.9, on pybind11 3,
# it states none, and the headers alone decide).
execute_process(
  COMMAND "${_found}" -c "import os, torch, torch._C as c
for n in ('COMPILER_TYPE', 'STDLIB', 'BUILD_ABI'):
    v = getattr(c, '_PYBIND11_' + n, None)
    if v: print('PYBIND11_%s=\"%s\"' % (n, v))
inc = os.path.join(os.path.dirname(torch.__file__), 'include')
if os.path.exists(os.path.join(inc, 'pybind11', 'pybind11.h')): print('include=' + inc)"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _abi ERROR_QUIET TIMEOUT 120)
set(RRFP_TORCH_PYBIND11_DEFINES "")
set(RRFP_TORCH_PYBIND11_INCLUDE "")
if(_rc EQUAL 0)
  string(REPLACE "\n" ";" _abi "${_abi}")
  foreach(_line IN LISTS _abi)
    if(_line MATCHES "^include=(.+)$")
      set(RRFP_TORCH_PYBIND11_INCLUDE "${CMAKE_MATCH_1}")
    elseif(_line MATCHES "^PYBIND11_")
      list(APPEND RRFP_TORCH_PYBIND11_DEFINES "${_line}")
    endif()
  endforeach()
endif()
set(_headers "pybind11's own headers")
if(RRFP_TORCH_PYBIND11_INCLUDE)
  set(_headers "torch's pybind11 headers (${RRFP_TORCH_PYBIND11_INCLUDE})")
endif()
message(STATUS "rrfp: the Python extension takes torch's pybind11 ABI tags "
               "(${RRFP_TORCH_PYBIND11_DEFINES}) and ${_headers}")
if(NOT DEFINED PYBIND11_FINDPYTHON)
  set(PYBIND11_FINDPYTHON ON)
endif()
find_package(pybind11 CONFIG QUIET)
find_library(TORCH_PYTHON_LIBRARY torch_python HINTS "${TORCH_INSTALL_PREFIX}/lib")
if(NOT pybind11_FOUND)
  set(RRFP_PYTHON_WHY "(pybind11's CMake files not found: install pybind11-dev)")
elseif(NOT TORCH_PYTHON_LIBRARY)
  set(RRFP_PYTHON_WHY "(libtorch_python not found next to LibTorch)")
else()
  set(RRFP_PYTHON ON)
  set(RRFP_PYTHON_WHY "(${_found})")
endif()
