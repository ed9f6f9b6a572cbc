"""The wire contracts of gpuslice-nomad-device: the .proto files written from
Nomad's and go-plugin's public definitions (each names its source and commit),
and the Python code protoc made of them (`make protos`; do not edit it)."""
