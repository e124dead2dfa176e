# Install rules and the package configuration, so that an installed shardgraph is used as
#   find_package(shardgraph 0.1 REQUIRED COMPONENTS cpu threads)
#   target_link_libraries(app PRIVATE shardgraph::cpu shardgraph::threads)
#
# Layout under the prefix:
#   include/shardgraph/...                         the core's and every built backend's headers
#   share/cmake/shardgraph/                        shardgraphConfig.cmake, its version file,
#                                                  shardgraph-<component>-targets.cmake,
#                                                  shardgraph_dependencies.cmake and the find modules
# Each component has its own export file, loaded only once its dependency is found, so a component
# whose dependency is missing on the consuming machine defines no target rather than a broken one.
include(CMakePackageConfigHelpers)

set(SHARDGRAPH_INSTALL_CMAKEDIR "${CMAKE_INSTALL_DATADIR}/cmake/shardgraph"
    CACHE STRING "Where the package configuration of shardgraph is installed, relative to the prefix")
mark_as_advanced(SHARDGRAPH_INSTALL_CMAKEDIR)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
# The launcher (docs/launching.md), next to the headers it starts programs of.
install(PROGRAMS "${PROJECT_SOURCE_DIR}/tools/shardgraph-run" DESTINATION "${CMAKE_INSTALL_BINDIR}")

foreach(component core ${SHARDGRAPH_ENABLED_BACKENDS})
  if(NOT component STREQUAL "core")
    # OPTIONAL: a backend may have no headers yet.
    install(DIRECTORY "${PROJECT_SOURCE_DIR}/backends/${component}/include/"
            DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" OPTIONAL)
  endif()
  install(TARGETS shardgraph_${component} EXPORT shardgraph_${component}_targets)
  install(EXPORT shardgraph_${component}_targets
          NAMESPACE shardgraph::
          FILE shardgraph-${component}-targets.cmake
          DESTINATION "${SHARDGRAPH_INSTALL_CMAKEDIR}")
endforeach()

set(SHARDGRAPH_INSTALLED_COMPONENTS ${SHARDGRAPH_ENABLED_BACKENDS})
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/shardgraphConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/shardgraphConfig.cmake"
  INSTALL_DESTINATION "${SHARDGRAPH_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/shardgraphConfigVersion.cmake"
  COMPATIBILITY SameMajorVersion
  ARCH_INDEPENDENT)

install(FILES
  "${PROJECT_BINARY_DIR}/shardgraphConfig.cmake"
  "${PROJECT_BINARY_DIR}/shardgraphConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/shardgraph_dependencies.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/FindCUDNN.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/shardgraph_find_helpers.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/FindKokkosCore.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/FindPCRE2.cmake"
  DESTINATION "${SHARDGRAPH_INSTALL_CMAKEDIR}")
