"""gRPC server reflection on real master and PS processes: grpcurl & co. can list them."""
from __future__ import annotations

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


def services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (reply,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        return {s.name for s in reply.list_services_response.service}


def test_master_and_ps_list_their_services(launcher):
    master = launcher.master()
    ps = launcher.ps(master.address)
    assert {"elasticps.v1.Master", "grpc.health.v1.Health"} <= services(master.address)
    assert {"elasticps.v1.ParameterServer", "grpc.health.v1.Health"} <= services(
        ps.grpc_address)
    # and the methods can be looked up by name, as a reflection client does before a call
    with grpc.insecure_channel(master.address) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        found = db.FindFileContainingSymbol("elasticps.v1.Master")
        assert "GetShard" in {m.name for s in found.service for m in s.method}
