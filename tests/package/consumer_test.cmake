# weft used as a package by a separate project, for real (issue 10, item 1; docs/using-weft.md). One MODE
# per ctest:
#   install          cmake --install the build into a fresh prefix; check what lands there (headers, libweft.a,
#                    libweft.so with its SONAME, tools, weftConfig.cmake, weftConfigVersion.cmake, weft.pc)
#   find_package     configure, build and run tests/package/find_package against that prefix: weft::weft
#                    (shared) and weft::weft_static, alone and under the installed weftrun (2 instances)
#   pkg_config       compile and link tests/package/consumer.cc with `pkg-config --cflags --libs weft`; run it
#   add_subdirectory configure, build and run tests/package/add_subdirectory, which embeds this source tree
# Every program checks its psum results and exits non-zero when one is wrong; any failing step fails the test.
#   cmake -DMODE=... -DSOURCE_DIR=<weft> -DBUILD_DIR=<weft build> -DWORK_DIR=<scratch> -DPREFIX=<prefix>
#         -DCXX=<compiler> -DWEFT_ARCH=<arch> -DJOBS=2 -P consumer_test.cmake
cmake_minimum_required(VERSION 3.25)
set(here ${CMAKE_CURRENT_LIST_DIR})

function(run)  # run(COMMAND... ) in WORK_DIR; fails the test with the output on a non-zero exit
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0")
    string(JOIN " " cmd ${ARGN})
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}${err}")
  endif()
  set(run_output "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect_files)
  foreach(f ${ARGN})
    if(NOT EXISTS ${PREFIX}/${f})
      file(GLOB_RECURSE listing RELATIVE ${PREFIX} ${PREFIX}/*)
      string(JOIN "\n  " listing ${listing})
      message(FATAL_ERROR "not installed: ${PREFIX}/${f}\ninstalled:\n  ${listing}")
    endif()
  endforeach()
endfunction()

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE ${PREFIX})
  file(MAKE_DIRECTORY ${WORK_DIR})
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
  expect_files(include/weft/weft.hpp include/weft/session.hpp include/weft/ops.hpp
               lib/libweft.a lib/libweft.so lib/cmake/weft/weftConfig.cmake lib/cmake/weft/weftConfigVersion.cmake
               lib/cmake/weft/weftTargets.cmake lib/pkgconfig/weft.pc
               bin/weftrun bin/poprun bin/weft-conformance bin/weft-bench)
  # Only the public headers: weft's internal ones (src/) stay out of the include directory.
  file(GLOB_RECURSE headers RELATIVE ${PREFIX}/include ${PREFIX}/include/*)
  foreach(h ${headers})
    if(NOT h MATCHES "^weft/[a-z_]+\\.hpp$")
      message(FATAL_ERROR "unexpected file in ${PREFIX}/include: ${h}")
    endif()
  endforeach()
  # The shared object carries a SONAME with the ABI version, and the usual symlinks lead to it.
  run(readelf -d ${PREFIX}/lib/libweft.so)
  if(NOT run_output MATCHES "Library soname: \\[(libweft\\.so\\.[0-9.]+)\\]")
    message(FATAL_ERROR "libweft.so has no versioned SONAME:\n${run_output}")
  endif()
  expect_files(lib/${CMAKE_MATCH_1})
  message(STATUS "installed into ${PREFIX}; SONAME ${CMAKE_MATCH_1}")

elseif(MODE STREQUAL "find_package")
  set(build ${WORK_DIR}/find_package)
  file(REMOVE_RECURSE ${build})
  run(${CMAKE_COMMAND} -S ${here}/find_package -B ${build} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX}
      -DCMAKE_PREFIX_PATH=${PREFIX})
  run(${CMAKE_COMMAND} --build ${build} -j ${JOBS})
  run(${build}/consumer)
  message(STATUS "weft::weft (shared): ${run_output}")
  run(${build}/consumer_static)
  message(STATUS "weft::weft_static: ${run_output}")
  # The shared one really uses the installed libweft.so, the static one no libweft at run time.
  run(readelf -d ${build}/consumer)
  if(NOT run_output MATCHES "NEEDED[^\n]*libweft\\.so")
    message(FATAL_ERROR "consumer (weft::weft) does not load libweft.so:\n${run_output}")
  endif()
  run(readelf -d ${build}/consumer_static)
  if(run_output MATCHES "libweft")
    message(FATAL_ERROR "consumer_static (weft::weft_static) loads libweft.so:\n${run_output}")
  endif()
  # Two instances of 4 devices under the installed launcher: psum across processes, to_host() shapes.
  run(${PREFIX}/bin/weftrun --num-instances 2 --num-replicas 8 ${build}/consumer)
  foreach(i 0 1)
    if(NOT run_output MATCHES "consumer: process ${i} of 2, 8 devices: psum ok")
      message(FATAL_ERROR "under weftrun, instance ${i} did not report success:\n${run_output}")
    endif()
  endforeach()
  message(STATUS "under weftrun:\n${run_output}")

elseif(MODE STREQUAL "pkg_config")
  set(build ${WORK_DIR}/pkg_config)
  file(REMOVE_RECURSE ${build})
  file(MAKE_DIRECTORY ${build})
  set(ENV{PKG_CONFIG_PATH} ${PREFIX}/lib/pkgconfig)
  run(pkg-config --modversion weft)
  message(STATUS "pkg-config finds weft ${run_output}")
  run(pkg-config --cflags --libs weft)
  string(STRIP "${run_output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run(pkg-config --variable=libdir weft)
  string(STRIP "${run_output}" libdir)
  run(${CXX} -std=c++20 -O1 ${here}/consumer.cc -o ${build}/consumer ${flags} -Wl,-rpath,${libdir})
  run(${build}/consumer)
  message(STATUS "pkg-config build: ${run_output}")

elseif(MODE STREQUAL "add_subdirectory")
  set(build ${WORK_DIR}/add_subdirectory)
  file(REMOVE_RECURSE ${build})
  # A host project without a build type (no -O flags), which weft must leave alone: the embedded library
  # compiles in 71 s instead of 115 s (Release) on 2 cores, and the consumer's pmap + psum run the same.
  run(${CMAKE_COMMAND} -S ${here}/add_subdirectory -B ${build} -DCMAKE_BUILD_TYPE=
      -DCMAKE_CXX_COMPILER=${CXX} -DWEFT_SOURCE_DIR=${SOURCE_DIR} -DWEFT_ARCH=${WEFT_ARCH})
  # Only the consumer and what it needs: the library (the configure step checked nothing else exists).
  run(${CMAKE_COMMAND} --build ${build} -j ${JOBS} --target consumer)
  run(${build}/consumer)
  message(STATUS "add_subdirectory build: ${run_output}")

else()
  message(FATAL_ERROR "MODE must be install, find_package, pkg_config or add_subdirectory, not '${MODE}'")
endif()
