# weft as a package (issue 10, item 1; docs/using-weft.md): one library, libweft, made of the six layer
# archives' objects, as a static archive and a shared object with a version and SONAME; the target weft::weft
# for add_subdirectory / FetchContent users; install rules for headers, libraries, tools and the CMake
# (weftConfig.cmake, weft::weft) and pkg-config (weft.pc) files.
#
# Why objects and not the layer archives: the layers (core -> array -> program, transport -> collectives -> runtime)
# stay separate targets so that the linker enforces the arrows inside weft, but a user should link one
# library, with no archive order to know. The layers are compiled once; libweft.a and libweft.so reuse their
# objects.

set(weft_layers weft_core weft_array weft_program weft_transport weft_collectives weft_runtime)

# Top level: both variants (the package installs both). As a subproject: only the one the host asks for
# through BUILD_SHARED_LIBS (default static), so nothing is compiled twice or made position independent
# without need.
# A sanitizer build (WEFT_TSAN, WEFT_ASAN) is for weft's own tests only: no shared object.
if(PROJECT_IS_TOP_LEVEL AND NOT WEFT_TSAN AND NOT WEFT_ASAN)
  set(weft_variants static shared)
elseif(PROJECT_IS_TOP_LEVEL)
  set(weft_variants static)
elseif(BUILD_SHARED_LIBS)
  set(weft_variants shared)
else()
  set(weft_variants static)
endif()

if("shared" IN_LIST weft_variants)
  # A shared object needs position-independent objects. -fno-semantic-interposition lets GCC keep inlining
  # calls between weft's own functions, as it does in the non-PIC (PIE) build, so the kernels do not slow.
  set_target_properties(${weft_layers} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    foreach(layer ${weft_layers})
      target_compile_options(${layer} PRIVATE -fno-semantic-interposition)
    endforeach()
  endif()
endif()

include(GNUInstallDirs)

# 0.x releases promise no ABI between minor versions: the SONAME carries major.minor until 1.0.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(weft_soversion ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(weft_soversion ${PROJECT_VERSION_MAJOR})
endif()

set(weft_objects "")
set(weft_targets "")
foreach(layer ${weft_layers})
  list(APPEND weft_objects $<TARGET_OBJECTS:${layer}>)
endforeach()

foreach(variant ${weft_variants})
  set(target weft_${variant})
  list(APPEND weft_targets ${target})
  string(TOUPPER ${variant} kind)
  add_library(${target} ${kind} ${weft_objects})
  add_library(weft::${target} ALIAS ${target})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME weft EXPORT_NAME ${target})
  # The usage requirements: only the public headers (no src/), C++20 and threads. MPI is an implementation
  # detail: PRIVATE, so the shared object records it as DT_NEEDED and the static archive names it link-only.
  # Eigen and nlohmann-json are header-only and compiled into the layers' objects: no consumer needs them.
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PUBLIC Threads::Threads PRIVATE $<BUILD_INTERFACE:MPI::MPI_C>
                                                                   $<BUILD_INTERFACE:Boost::context>)
endforeach()
# Installed, the archive's MPI is weft::mpi, which weftConfig.cmake defines: FindMPI's C component needs the
# C language, which a C++-only consumer project has not enabled, so the config takes MPI's CXX component
# there (without the MPI C++ bindings) and MPI::MPI_C only where C is enabled.
if(TARGET weft_static)
  target_link_libraries(weft_static INTERFACE "$<INSTALL_INTERFACE:$<LINK_ONLY:weft::mpi>>"
                                              "$<INSTALL_INTERFACE:$<LINK_ONLY:Boost::context>>")
endif()
if(TARGET weft_shared)
  set_target_properties(weft_shared PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${weft_soversion})
  # Every symbol resolved at link time: a missing dependency fails the build, not a user's program.
  # (A sanitizer's runtime is resolved from the executable, hence not under WEFT_TSAN.)
  if(NOT WEFT_TSAN AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_link_options(weft_shared PRIVATE -Wl,--no-undefined)
  endif()
endif()

# weft::weft in the build tree: the variant BUILD_SHARED_LIBS asks for (static by default). Installed,
# weftConfig.cmake chooses the shared one unless WEFT_USE_STATIC_LIBS is set (docs/using-weft.md).
if(BUILD_SHARED_LIBS AND TARGET weft_shared)
  add_library(weft::weft ALIAS weft_shared)
else()
  add_library(weft::weft ALIAS weft_static)
endif()

if(NOT WEFT_INSTALL)
  return()
endif()

# ---- install ---------------------------------------------------------------------------------------------
include(CMakePackageConfigHelpers)
set(weft_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
install(TARGETS ${weft_targets} EXPORT weftTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/weft DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(EXPORT weftTargets NAMESPACE weft:: DESTINATION ${weft_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/weftConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/weftConfig.cmake INSTALL_DESTINATION ${weft_cmake_dir})
# 0.x: a minor version may break the API, so 0.1 satisfies only find_package(weft 0.1[.x]).
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/weftConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/weftConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/weftConfigVersion.cmake
        DESTINATION ${weft_cmake_dir})

# pkg-config: Libs names the shared object; Libs.private adds what the static archive needs (MPI by full
# path, so no MPI .pc file has to be found; threads).
set(weft_pc_private "")
foreach(lib ${MPI_C_LIBRARIES})
  string(APPEND weft_pc_private " ${lib}")
endforeach()
# Boost.Context (the fiber scheduler's stack switching) for the archive.
get_target_property(weft_boost_context_location Boost::context LOCATION)
string(STRIP "${weft_pc_private} ${weft_boost_context_location} ${MPI_C_LINK_FLAGS}" weft_pc_private)
file(RELATIVE_PATH weft_pc_prefix_from_pcdir /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${CMAKE_CURRENT_LIST_DIR}/weft.pc.in ${CMAKE_CURRENT_BINARY_DIR}/weft.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/weft.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
