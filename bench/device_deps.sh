# device_deps.sh — sourced by scripts that build C on the GPU machine, which has no package registry:
# when the Oniguruma, jansson or libunistring headers are missing, unpack the .debs/ carried with the
# call (apt-get download libonig5 libonig-dev libjansson4 libjansson-dev libunistring2 libunistring-dev)
# into /tmp/tokdeps and set INC / LIBS (bash arrays) for gcc. Both stay empty where the system has them.
INC=() LIBS=()
if [ ! -f /usr/include/oniguruma.h ] || [ ! -f /usr/include/jansson.h ] || [ ! -f /usr/include/uninorm.h ]; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/tokdeps; done
  L=/tmp/tokdeps/usr/lib/x86_64-linux-gnu
  INC=(-I/tmp/tokdeps/usr/include) LIBS=(-L"$L" -Wl,-rpath,"$L")
fi
