# Install layout and the Debian package (`cpack -G DEB` in the build folder).
#
# `cmake --install build --prefix /usr` and the package lay out the same tree:
#   /usr/bin/                           ringtrain, ringtraind, ringctl, ringckpt, ringfs(d), ...
#   /usr/lib/systemd/system/            ringtraind.service
#   /usr/lib/sysusers.d/ringtrain.conf  the `ringtrain` system user
#   /usr/share/ringtrain/web/           the status page's files (the daemon serves its own copy)
#   /usr/share/doc/ringtrain/           README.md, docs/, examples/ (node.toml, job configs)
# The unit runs /usr/bin/ringtraind: install with prefix /usr for it to work as is.
include(GNUInstallDirs)

# The version lives in one place, base/version.h.
file(STRINGS ${PROJECT_SOURCE_DIR}/base/version.h version_line
     REGEX "kRingtrainVersion\\[\\] = \"[0-9]+\\.[0-9]+\\.[0-9]+\"")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" RINGTRAIN_VERSION "${version_line}")
if(NOT RINGTRAIN_VERSION)
  message(FATAL_ERROR "no kRingtrainVersion \"X.Y.Z\" in base/version.h")
endif()

# Every user-facing binary that this tree builds (some come from folders still being written).
set(installed_binaries "")
foreach(binary ringtrain ringtrain_dist ringtraind ringctl ringckpt ringfs ringfsd)
  if(TARGET ${binary})
    list(APPEND installed_binaries ${binary})
  endif()
endforeach()
install(TARGETS ${installed_binaries} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(FILES ${PROJECT_SOURCE_DIR}/tools/systemd/ringtraind.service
        DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/tools/systemd/sysusers.conf
        DESTINATION lib/sysusers.d RENAME ringtrain.conf)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/daemon/web/assets/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ringtrain/web)
install(FILES ${PROJECT_SOURCE_DIR}/tools/systemd/node.toml
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/jobs FILES_MATCHING PATTERN "*.toml")
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ringtrain)
set(CPACK_PACKAGE_VERSION ${RINGTRAIN_VERSION})
set(CPACK_PACKAGE_VENDOR "ringtrain")
set(CPACK_PACKAGE_CONTACT "ringtrain maintainers <ringtrain@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "fault-tolerant elastic GPT training: node daemon, chunk store and tools")
set(CPACK_PACKAGE_DESCRIPTION
    "One ringtraind per node forms a ring with its peers, trains a GPT model with tensor, "
    "pipeline and data parallelism, checkpoints into its replicated chunk store and recovers "
    "from node loss without a person touching anything.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # ringtrain_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Runtime dependencies from the binaries' shared libraries (dpkg-shlibdeps), plus what the
# maintainer script uses.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/tools/systemd/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
include(CPack)
