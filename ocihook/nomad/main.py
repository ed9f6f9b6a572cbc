"""gpuslice-nomad-device: started by a Nomad client from its plugin_dir, never
by hand (docs/nomad.md). It checks that go-plugin's client started it, then
serves until the client stops it."""
from __future__ import annotations

import os
import sys

from ocihook import messages


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) > 1:
        messages.error(f"gpuslice-nomad-device takes no arguments (got {' '.join(sys.argv[1:])}); "
                       "its configuration is the plugin block of the Nomad client "
                       "(docs/nomad.md)")
    try:
        from ocihook.nomad import goplugin, plugin
        from ocihook.nomad.proto import base_pb2, device_pb2
    except ImportError as e:
        messages.error(f"gpuslice-nomad-device needs grpcio, protobuf and msgpack ({e}); "
                       "install python3-grpcio, python3-protobuf and python3-msgpack")
    try:
        goplugin.check_environment(os.environ)
    except goplugin.HandshakeError as e:
        messages.error(str(e))
    impl = plugin.DevicePlugin()
    goplugin.serve([(base_pb2.DESCRIPTOR.services_by_name["BasePlugin"], impl),
                    (device_pb2.DESCRIPTOR.services_by_name["DevicePlugin"], impl)],
                   on_stop=impl.stop)


if __name__ == "__main__":
    main()
