"""The plugin's services: Nomad's base plugin (what it is, its configuration)
and device plugin (Fingerprint, Reserve, Stats), on the node's accountant.

The accountant is read read-only, as the exporter reads it (WAL: a reader
never holds up an admission); every write goes through gpuslice-hook
(reserve.py). One lock keeps the offers, the claims and the settings
consistent between the gRPC server's threads.
"""
from __future__ import annotations

import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, NoReturn, Optional, Tuple

import grpc
from google.protobuf import timestamp_pb2

from ocihook import accountant, room, snapshot
from ocihook.messages import bounded
from ocihook.nomad import offers, reserve, settings
from ocihook.nomad.proto import attribute_pb2, base_pb2, device_pb2, stats_pb2

VENDOR = "gpuslice"
DEVICE_TYPE = "gpu"
PLUGIN_NAME = "gpuslice"
# Nomad's device plugin API versions this plugin speaks (plugins/device: v0.1.0).
API_VERSIONS = ("v0.1.0",)
DEFAULT_STATS_INTERVAL_S = 1.0
MIB = 1024 * 1024
MAX_ERROR_CHARS = 1000  # 12 KB at most on the wire, under gRPC's 16 KiB of metadata


def plugin_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("gpuslice")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "0.0.0+tree"


def log(line: str) -> None:
    """One line on stderr, which go-plugin's client copies into Nomad's log;
    bounded as an error is."""
    print(f"gpuslice-nomad-device: {bounded(line, MAX_ERROR_CHARS)}", file=sys.stderr,
          flush=True)


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with one line, bounded: gRPC sends it as a header (grpc-message,
    percent-encoded: up to 12 bytes a character) and replaces a status over its
    16 KiB metadata limit with RESOURCE_EXHAUSTED "Stream removed", losing the line."""
    context.abort(code, bounded(message, MAX_ERROR_CHARS))
    raise AssertionError("unreachable: context.abort raises")


@dataclass
class Claim:
    """A reservation this plugin made: for which instance, under which claim id;
    container: who serves it now (the claim itself until a container took it)."""
    instance: offers.Instance
    claim_id: str
    container: str


class DevicePlugin:
    """Both services on one object: Nomad dispenses the base and device plugin
    from the same process and calls SetConfig before anything else."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = False
        self._settings: Optional[settings.Settings] = None
        self._offers = offers.Offers()
        self._claims: Dict[str, Claim] = {}  # by instance ID
        self._claim_events_seen = 0
        self._last_problem: Optional[str] = None

    # ------------------------------------------------------------ base plugin

    def PluginInfo(self, request: base_pb2.PluginInfoRequest, context: grpc.ServicerContext
                   ) -> base_pb2.PluginInfoResponse:
        return base_pb2.PluginInfoResponse(type=base_pb2.DEVICE,
                                           plugin_api_versions=list(API_VERSIONS),
                                           plugin_version=plugin_version(), name=PLUGIN_NAME)

    def ConfigSchema(self, request: base_pb2.ConfigSchemaRequest,
                     context: grpc.ServicerContext) -> base_pb2.ConfigSchemaResponse:
        return base_pb2.ConfigSchemaResponse(spec=settings.schema())

    def SetConfig(self, request: base_pb2.SetConfigRequest, context: grpc.ServicerContext
                  ) -> base_pb2.SetConfigResponse:
        version = request.plugin_api_version
        if version and version not in API_VERSIONS:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                          f"gpuslice-nomad-device: error: plugin_api_version {version!r} is not "
                          f"one this plugin speaks ({', '.join(API_VERSIONS)})")
        try:
            parsed = settings.parse(request.msgpack_config)
        except settings.SettingsError as e:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"gpuslice-nomad-device: error: {e}")
        with self._changed:
            self._settings = parsed
            self._changed.notify_all()
        return base_pb2.SetConfigResponse()

    # ---------------------------------------------------------- device plugin

    def _current(self) -> settings.Settings:
        """The settings SetConfig gave; before it (Nomad calls it first), the
        defaults. SettingsError when those cannot be loaded."""
        if self._settings is None:
            self._settings = settings.defaults()
        return self._settings

    def _period(self) -> float:
        return self._settings.fingerprint_period if self._settings else \
            settings.parse_duration("fingerprint_period", settings.DEFAULTS["fingerprint_period"])

    def _problem(self, line: Optional[str]) -> None:
        if line and line != self._last_problem:
            log(line)
        self._last_problem = line

    def _read(self, cfg: settings.Settings
              ) -> Optional[Tuple[List[accountant.CardUsage], accountant.Policy]]:
        acct, why = snapshot.open_accountant(cfg.gpuslice.database)
        if acct is None:
            self._problem(why)
            return None
        try:
            usage, policy = acct.usage(), acct.policy()
            self._claim_events_seen, seen = acct.claim_events(self._claim_events_seen)
        except (accountant.AccountantError, sqlite3.Error) as e:
            self._problem(f"{cfg.gpuslice.database}: cannot read: {e}")
            return None
        finally:
            acct.close()
        if policy is None:
            self._problem(f"{cfg.gpuslice.database}: no admission policy recorded; run "
                          "`gpuslice cdi generate`")
            return None
        by_claim = {c.claim_id: c for c in self._claims.values()}
        for claim_id, container in seen:
            if claim_id in by_claim:
                by_claim[claim_id].container = container
        return usage, policy

    def _give_back_stale(self, cfg: settings.Settings, usage: List[accountant.CardUsage]) -> bool:
        rows = [(r.container_id, r.pid, r.created) for u in usage for r in u.reservations]
        # A claim a container took over has its container's id now, not ours.
        mine = {c.claim_id for c in self._claims.values() if c.container == c.claim_id}
        stale = reserve.stale_claims(rows, mine, time.time(), cfg.claim_timeout)
        for cid in stale:
            try:
                if reserve.release(cfg.gpuslice, cid):
                    log(f"gave back {cid[:12]}: no container took it within "
                        f"{cfg.claim_timeout:g} s")
            except reserve.ReserveError as e:
                self._problem(str(e))
        return bool(stale)

    def _fingerprint_locked(self) -> device_pb2.FingerprintResponse:
        try:
            cfg = self._current()
        except settings.SettingsError as e:
            self._problem(str(e))
            return device_pb2.FingerprintResponse()
        read = self._read(cfg)
        if read is not None and self._give_back_stale(cfg, read[0]):
            read = self._read(cfg)
        if read is None:
            return device_pb2.FingerprintResponse()
        usage, _ = read
        try:
            rooms = room.read(cfg.gpuslice, cfg.gpuslice.profiles)
        except room.RoomError as e:
            self._problem(str(e))
            return device_pb2.FingerprintResponse()
        self._problem(None)
        groups = self._offers.update(usage, rooms, cfg.gpuslice.profiles)
        try:
            version = reserve.driver_version(cfg.gpuslice)
        except reserve.ReserveError as e:
            self._problem(str(e))
            version = ""
        out = device_pb2.FingerprintResponse()
        for p in cfg.gpuslice.profiles:
            g = out.device_group.add(vendor=VENDOR, device_type=DEVICE_TYPE, device_name=p.name)
            g.attributes["memory"].CopyFrom(attribute_pb2.Attribute(int_val=p.memory_mib,
                                                                    unit="MiB"))
            g.attributes["cores"].CopyFrom(attribute_pb2.Attribute(int_val=p.cores or 0,
                                                                   unit="%"))
            g.attributes["priority"].CopyFrom(attribute_pb2.Attribute(string_val=p.priority))
            models = sorted({u.card.name for u in usage if offers.offered_on(u.card, p)})
            if models:
                g.attributes["card_model"].CopyFrom(
                    attribute_pb2.Attribute(string_val=", ".join(models)))
            if version:
                g.attributes["driver_version"].CopyFrom(
                    attribute_pb2.Attribute(string_val=version))
            for inst in groups[p.name]:
                g.devices.add(ID=inst.id, healthy=inst.healthy,
                              health_description="" if inst.healthy else
                              f"card {inst.card.index} is out of service: "
                              f"{inst.card.health_reason or 'no reason recorded'}")
        return out

    def Fingerprint(self, request: device_pb2.FingerprintRequest,
                    context: grpc.ServicerContext) -> Iterator[device_pb2.FingerprintResponse]:
        """The offers now, then again whenever they change: checked every
        fingerprint_period, and at once after a Reserve or a SetConfig."""
        last = None
        while context.is_active():
            with self._changed:
                if self._stopping:
                    return
                answer = self._fingerprint_locked()
            if answer != last:
                last = answer
                yield answer
            with self._changed:
                if not self._stopping:
                    self._changed.wait(self._period())

    def Reserve(self, request: device_pb2.ReserveRequest, context: grpc.ServicerContext
                ) -> device_pb2.ReserveResponse:
        ids = list(request.device_ids)
        if len(ids) != 1:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                          f"gpuslice-nomad-device: error: Reserve of {len(ids)} instances "
                          f"({', '.join(ids) or 'none'}): a task gets one slice; ask for it with "
                          "count = 1 (a bigger profile gives more memory)")
        with self._changed:
            try:
                cfg = self._current()
            except settings.SettingsError as e:
                _abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                              f"gpuslice-nomad-device: error: {e}")
            inst = self._offers.find(ids[0])
            if inst is None:
                _abort(context, grpc.StatusCode.NOT_FOUND,
                              f"gpuslice-nomad-device: error: device id {ids[0]!r} is not an "
                              "instance this plugin offers now (reserved already, withdrawn as "
                              "its card filled, or never offered); Nomad places the task again "
                              "by the next fingerprint")
            if not inst.healthy:
                _abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                              f"gpuslice-nomad-device: error: device id {ids[0]!r}: card "
                              f"{inst.card.index} is out of service "
                              f"({inst.card.health_reason or 'no reason recorded'})")
            try:
                token, res = reserve.reserve(cfg.gpuslice, inst)
            except reserve.ReserveError as e:
                code = grpc.StatusCode.RESOURCE_EXHAUSTED if e.refused else \
                    grpc.StatusCode.FAILED_PRECONDITION
                self._changed.notify_all()  # the offers were stale: recompute now
                _abort(context, code, str(e))
            self._offers.retire(inst.id)
            cid = reserve.claim_id(token)
            self._claims[inst.id] = Claim(inst, cid, cid)
            self._changed.notify_all()
        return device_pb2.ReserveResponse(container_res=res)

    def _stats_locked(self) -> device_pb2.StatsResponse:
        out = device_pb2.StatsResponse()
        if not self._claims:  # reservations are made after SetConfig
            return out
        cfg = self._current()
        if self._read(cfg) is None:
            return out
        acct, _ = snapshot.open_accountant(cfg.gpuslice.database)
        if acct is None:
            return out
        try:
            snap = snapshot.take(cfg.gpuslice.state_dir, acct, None)
        finally:
            acct.close()
        views = {v.reservation.container_id: v for card in snap.cards for v in card.containers}
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        groups: Dict[str, device_pb2.DeviceGroupStats] = {}
        for iid, claim in sorted(self._claims.items()):
            view = views.get(claim.container)
            if view is None:  # its container is gone: nothing held, nothing to say
                continue
            name = claim.instance.profile.name
            g = groups.get(name)
            if g is None:
                g = groups[name] = out.groups.add(vendor=VENDOR, type=DEVICE_TYPE, name=name)
            s = g.instance_stats[iid]
            limit = view.limit_bytes // MIB
            used = view.used_bytes // MIB if view.used_bytes is not None else None
            if used is None:
                s.summary.CopyFrom(stats_pb2.StatValue(
                    string_val=f"unknown ({view.claim.problem})", desc="memory used"))
            else:
                s.summary.CopyFrom(stats_pb2.StatValue(int_numerator_val=used,
                                                       int_denominator_val=limit, unit="MiB",
                                                       desc="memory used of the slice"))
                s.stats.attributes["memory_used"].CopyFrom(stats_pb2.StatValue(
                    int_numerator_val=used, unit="MiB", desc="memory the slice's processes hold"))
            s.stats.attributes["memory_limit"].CopyFrom(stats_pb2.StatValue(
                int_numerator_val=limit, unit="MiB", desc="the slice's memory"))
            s.stats.attributes["container"].CopyFrom(stats_pb2.StatValue(
                string_val=claim.container if claim.container != claim.claim_id else "",
                desc="the container that holds the slice; empty until one starts"))
            if view.card_seconds is not None:
                s.stats.attributes["card_time"].CopyFrom(stats_pb2.StatValue(
                    float_numerator_val=view.card_seconds, unit="s",
                    desc="card time the slice's processes were charged"))
            s.timestamp.CopyFrom(now)
        return out

    def Stats(self, request: device_pb2.StatsRequest, context: grpc.ServicerContext
              ) -> Iterator[device_pb2.StatsResponse]:
        interval = request.collection_interval.ToNanoseconds() / 1e9 \
            if request.HasField("collection_interval") else 0
        interval = interval if interval > 0 else DEFAULT_STATS_INTERVAL_S
        while context.is_active():
            with self._changed:
                if self._stopping:
                    return
                answer = self._stats_locked()
            yield answer
            with self._changed:
                if not self._stopping:
                    self._changed.wait(interval)

    def stop(self) -> None:
        """End the streams (the server's Shutdown)."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
