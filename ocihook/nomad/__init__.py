"""gpuslice-nomad-device: a Nomad device plugin that offers gpuslice's slices
to Nomad's scheduler (docs/nomad.md).

- ``goplugin``: what HashiCorp's go-plugin asks of any plugin process (the
  handshake, the health, broker, controller and stdio services), for a
  plugin written in Python;
- ``settings``: the plugin's configuration block (schema, msgpack, rules);
- ``offers``: which instances each device group offers, from the accountant;
- ``reserve``: a reservation through gpuslice-hook and what the task gets;
- ``plugin``: the base and device services; ``main``: the command.

``proto/`` holds the wire contracts, written from Nomad's and go-plugin's
public definitions, and the Python code protoc made of them (``make
protos``).
"""
