# Distribution packages of gpuslice (docs/packages.md), built from the files
# git knows (tracked and untracked, not ignored): a clean clone builds the same.
#
#   make deb      dist/gpuslice_VERSION-1_ARCH.deb  (dpkg-buildpackage; Debian, Ubuntu), and the
#                 source package dist/gpuslice_VERSION-1.dsc
#   make rpm      dist/gpuslice-VERSION-1.ARCH.rpm  (rpmbuild; also on Debian with its rpm package)
#   make lint     lintian and rpmlint of what dist/ holds, into dist/lintian.txt and dist/rpmlint.txt
#   make clean    removes dist/ and build/packages/
#   make protos   ocihook/nomad/proto/*_pb2.py from the .proto files beside them (protoc
#                 of Debian 12's protobuf-compiler, 3.21: the code runs on protobuf 4.21 and
#                 later; tests/test_nomad_device.py checks they are its output)
#
# Build tools on Debian 12 (install.sh --with-tests installs them): build-essential
#   libsqlite3-dev debhelper dh-python pybuild-plugin-pyproject python3-all
#   python3-setuptools python3-yaml python3-click rpm lintian rpmlint git

# Packages are built with the system's own tools and Python (/usr/bin/python3),
# never a python3 that PATH finds first (pyenv, a venv, /usr/local).
BUILD_ENV = env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin

include version.mk
VERSION := $(GPUSLICE_VERSION)
BUILD := build/packages
DIST := dist

.PHONY: deb rpm lint clean check-version protos

check-version:
	@test -n "$(VERSION)" || { echo "make: no version in pyproject.toml" >&2; exit 1; }
	@deb=$$(sed -n '1s/^gpuslice (\([^-]*\)-.*/\1/p' packaging/deb/debian/changelog); \
	 rpm=$$(sed -n 's/^Version:[[:space:]]*//p' packaging/rpm/gpuslice.spec); \
	 if [ "$$deb" != "$(VERSION)" ] || [ "$$rpm" != "$(VERSION)" ]; then \
	   echo "make: pyproject.toml says $(VERSION), debian/changelog $$deb, gpuslice.spec $$rpm:" \
	        "give them one version" >&2; exit 1; fi

# $(call copy_tree,DIR): a copy of the source tree in DIR (made afresh): the
# files git knows, as they are in the working tree, committed or not; nothing
# ignored, so no build output of this checkout. A tracked file deleted in the
# working tree is left out.
define copy_tree
	rm -rf $(1)
	mkdir -p $(1)
	git ls-files -z --cached --others --exclude-standard \
	  | tar --null --files-from=- --ignore-failed-read --warning=no-failed-read -cf - \
	  | tar -C $(1) -xf -
endef

# The source package too (dist/*.dsc, lintian checks it): the tree as the
# upstream tarball, packaging/deb/debian as the Debian part; then the binary.
deb: check-version
	rm -rf $(BUILD)/deb
	$(call copy_tree,$(BUILD)/deb/gpuslice-$(VERSION))
	tar -C $(BUILD)/deb -czf $(BUILD)/deb/gpuslice_$(VERSION).orig.tar.gz gpuslice-$(VERSION)
	cp -R packaging/deb/debian $(BUILD)/deb/gpuslice-$(VERSION)/debian
	cd $(BUILD)/deb/gpuslice-$(VERSION) && $(BUILD_ENV) dpkg-source -b .
	cd $(BUILD)/deb/gpuslice-$(VERSION) && $(BUILD_ENV) dpkg-buildpackage -us -uc -b
	mkdir -p $(DIST)
	cp $(BUILD)/deb/gpuslice_$(VERSION)-*.deb $(BUILD)/deb/gpuslice_$(VERSION)-*.dsc \
	   $(BUILD)/deb/gpuslice_$(VERSION)-*.debian.tar.* $(BUILD)/deb/gpuslice_$(VERSION).orig.tar.gz $(DIST)/

# rpmbuild on a host without Fedora's macros (Debian): the systemd and
# Python macros the spec uses come from packaging/rpm/macros.fallback (which
# also strips the ELF files: no debuginfo package there), and the Fedora
# names of the build requirements are not looked up.
RPM_FALLBACK := $(shell rpm --eval '%{?systemd_post:yes}' 2>/dev/null | grep -q yes || echo yes)
RPMBUILD_ARGS = --define '_topdir $(abspath $(BUILD))/rpm' \
  $(if $(RPM_FALLBACK),--load packaging/rpm/macros.fallback --nodeps)

rpm: check-version
	rm -rf $(BUILD)/rpm
	$(call copy_tree,$(BUILD)/rpm/gpuslice-$(VERSION))
	mkdir -p $(BUILD)/rpm/SOURCES $(BUILD)/rpm/SPECS
	tar -C $(BUILD)/rpm -czf $(BUILD)/rpm/SOURCES/gpuslice-$(VERSION).tar.gz gpuslice-$(VERSION)
	cp packaging/rpm/gpuslice.spec $(BUILD)/rpm/SPECS/
	$(BUILD_ENV) rpmbuild $(RPMBUILD_ARGS) -bb $(BUILD)/rpm/SPECS/gpuslice.spec
	mkdir -p $(DIST)
	cp $(BUILD)/rpm/RPMS/*/gpuslice-$(VERSION)-*.rpm $(DIST)/

lint:
	lintian --pedantic --display-info --show-overrides $(DIST)/gpuslice_*.deb $(DIST)/gpuslice_*.dsc 2>&1 | tee $(DIST)/lintian.txt
	rpmlint --rpmlintrc packaging/rpm/gpuslice.rpmlintrc $(DIST)/gpuslice-*.rpm packaging/rpm/gpuslice.spec \
	  2>&1 | tee $(DIST)/rpmlint.txt

clean:
	rm -rf $(DIST) $(BUILD)
	[ ! -d build ] || rmdir --ignore-fail-on-non-empty build

protos:
	protoc -I . --python_out=. ocihook/nomad/proto/*.proto
