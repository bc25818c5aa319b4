"""An event-file reader independent of gorun's writer, for its tests.

Reads a TensorBoard event file with Debian's python3-protobuf: the
records' framing and masked CRC-32C checked here, the payloads decoded by
protobuf from a declaration of TensorFlow's Event, Summary and SessionLog
messages (the fields TensorBoard's scalar plots and its purge of a
restarted run's orphaned points read). Prints one JSON object per line:
the file version event, a session log as {"step", "wall_time",
"session_status"}, each scalar as {"step", "wall_time", "tag", "value"}. Exits non-zero naming the offset of
a record that is cut short or fails its checksum.

    /usr/bin/python3 train/report/testdata/tfevents.py EVENTFILE
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    """tensorflow.Event and Summary, as far as scalars go, declared here."""
    f = descriptor_pb2.FileDescriptorProto(name="events.proto", package="tb", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    value = f.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL)
    summary = f.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=T.TYPE_MESSAGE, type_name=".tb.Value", label=T.LABEL_REPEATED)
    session_log = f.message_type.add(name="SessionLog")
    session_log.field.add(name="status", number=1, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)  # an enum: START is 1
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=T.TYPE_MESSAGE, type_name=".tb.Summary", label=T.LABEL_OPTIONAL)
    event.field.add(name="session_log", number=7, type=T.TYPE_MESSAGE, type_name=".tb.SessionLog", label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    desc = pool.FindMessageTypeByName("tb.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def main(path):
    Event = event_class()
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if at + 12 > len(data):
            sys.exit("%s: record at offset %d: header cut short" % (path, at))
        header = data[at:at + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[at + 8:at + 12])
        if hcrc != masked_crc32c(header):
            sys.exit("%s: record at offset %d: length checksum mismatch" % (path, at))
        payload = data[at + 12:at + 12 + n]
        if len(payload) != n or at + 16 + n > len(data):
            sys.exit("%s: record at offset %d: payload cut short" % (path, at))
        (pcrc,) = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
        if pcrc != masked_crc32c(payload):
            sys.exit("%s: record at offset %d: payload checksum mismatch" % (path, at))
        ev = Event()
        ev.ParseFromString(payload)
        if ev.file_version:
            print(json.dumps({"step": ev.step, "wall_time": ev.wall_time, "file_version": ev.file_version}))
        if ev.HasField("session_log"):
            print(json.dumps({"step": ev.step, "wall_time": ev.wall_time, "session_status": ev.session_log.status}))
        for v in ev.summary.value:
            print(json.dumps({"step": ev.step, "wall_time": ev.wall_time, "tag": v.tag, "value": v.simple_value}))
        at += 16 + n


if __name__ == "__main__":
    main(sys.argv[1])
