/**
 * TensorBoard event files (`events.out.tfevents.*`) from training-step metrics, so that the
 * run's scalars open in TensorBoard, tensorboardX/PyTorch's readers, `wandb sync
 * --sync-tensorboard` or MLflow as they are.
 *
 * Why this format and not W&B's offline one: an event file is a small, stable format (TFRecord
 * framing around `Event` protobufs, unchanged since 2016) that every one of those tools reads,
 * W&B included; W&B's offline `.wandb` files are an internal, versioned record log meant to be
 * written by its own service. Why hand-written: no maintained npm package writes event files
 * (the TFRecord packages write `tf.Example`, not `Event`, and the JS TensorBoard writers are
 * unmaintained), and the part needed is ~60 lines: the TFRecord frame (length, masked CRC32C of
 * the length, data, masked CRC32C of the data; the CRC itself comes from `@aws-crypto/crc32c`)
 * and three protobuf messages encoded by hand (`Event{wall_time=1, step=2, file_version=3,
 * summary=5}`, `Summary{value=1}`, `Summary.Value{tag=1, simple_value=2}`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readTfEvents, tfEventsFile } from "./tfevents.ts";
 * const bytes = tfEventsFile([{ step: 1, wall_time: 1.5, scalars: { loss: 0.25 } }]);
 * const events = readTfEvents(bytes);
 * assert.equal(events[0].file_version, "brain.Event:2");
 * assert.deepEqual(events[1].scalars, { loss: 0.25 });
 * ```
 *
 * @module
 */
import { crc32c } from "@aws-crypto/crc32c";

/** One step's scalars. */
export interface TfScalarEvent {
  step: number;
  /** Seconds since the epoch. */
  wall_time: number;
  scalars: Record<string, number>;
}

/** A decoded event (what {@link readTfEvents} returns). */
export interface TfDecodedEvent {
  wall_time: number;
  step: number;
  file_version?: string;
  scalars: Record<string, number>;
}

/**
 * TFRecord's masked CRC32C (the mask keeps a CRC of data that holds CRCs from colliding).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { maskedCrc32c } from "./tfevents.ts";
 * // CRC32C("123456789") = 0xe3069283, masked: rotate right by 15, add 0xa282ead8.
 * assert.equal(maskedCrc32c(new TextEncoder().encode("123456789")), 0xc78ab0e5);
 * ```
 */
export function maskedCrc32c(data: Uint8Array): number {
  const crc = crc32c(data) >>> 0;
  return ((((crc >>> 15) | (crc << 17)) >>> 0) + 0xa282ead8) >>> 0;
}

class ProtoWriter {
  #parts: number[] = [];
  varint(value: number | bigint): this {
    let v = BigInt.asUintN(64, BigInt(value));
    do {
      let byte = Number(v & 0x7fn);
      v >>= 7n;
      if (v) byte |= 0x80;
      this.#parts.push(byte);
    } while (v);
    return this;
  }
  tag(field: number, wire: number): this {
    return this.varint((field << 3) | wire);
  }
  bytes(field: number, data: Uint8Array): this {
    this.tag(field, 2).varint(data.length);
    for (const b of data) this.#parts.push(b);
    return this;
  }
  double(field: number, value: number): this {
    const buf = new DataView(new ArrayBuffer(8));
    buf.setFloat64(0, value, true);
    return this.#fixed(field, 1, buf);
  }
  float(field: number, value: number): this {
    const buf = new DataView(new ArrayBuffer(4));
    buf.setFloat32(0, value, true);
    return this.#fixed(field, 5, buf);
  }
  /** A fixed-width field: wire type 1 (8 bytes) or 5 (4 bytes), little-endian in `buf`. */
  #fixed(field: number, wire: 1 | 5, buf: DataView): this {
    this.tag(field, wire);
    for (let i = 0; i < buf.byteLength; i++) this.#parts.push(buf.getUint8(i));
    return this;
  }
  done(): Uint8Array<ArrayBuffer> {
    return new Uint8Array(this.#parts);
  }
}

const utf8 = new TextEncoder();

function eventProto(
  event: {
    wall_time: number;
    step: number;
    file_version?: string;
    scalars?: Record<string, number>;
  },
): Uint8Array<ArrayBuffer> {
  const w = new ProtoWriter().double(1, event.wall_time).tag(2, 0).varint(event.step);
  if (event.file_version !== undefined) w.bytes(3, utf8.encode(event.file_version));
  const entries = Object.entries(event.scalars ?? {}).filter(([, v]) => Number.isFinite(v));
  if (event.scalars) {
    const summary = new ProtoWriter();
    for (const [tag, value] of entries) {
      summary.bytes(1, new ProtoWriter().bytes(1, utf8.encode(tag)).float(2, value).done());
    }
    w.bytes(5, summary.done());
  }
  return w.done();
}

function frame(data: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(8 + 4 + data.length + 4);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(data.length), true);
  view.setUint32(8, maskedCrc32c(out.subarray(0, 8)), true);
  out.set(data, 12);
  view.setUint32(12 + data.length, maskedCrc32c(data), true);
  return out;
}

/**
 * The records of an event file: the `brain.Event:2` version record, then one per step.
 * Append further steps with {@link tfEventRecord}.
 */
export function tfEventsFile(
  events: readonly TfScalarEvent[],
  wallTime = Date.now() / 1000,
): Uint8Array<ArrayBuffer> {
  const records = [
    frame(
      eventProto({
        wall_time: events[0]?.wall_time ?? wallTime,
        step: 0,
        file_version: "brain.Event:2",
      }),
    ),
    ...events.map(tfEventRecord),
  ];
  const out = new Uint8Array(records.reduce((a, r) => a + r.length, 0));
  let at = 0;
  for (const r of records) {
    out.set(r, at);
    at += r.length;
  }
  return out;
}

/** One framed step record (to append to an event file). */
export function tfEventRecord(event: TfScalarEvent): Uint8Array<ArrayBuffer> {
  return frame(eventProto(event));
}

/** The conventional file name (`events.out.tfevents.<seconds>.<host>`), which TensorBoard lists. */
export function tfEventsFileName(wallTime = Date.now() / 1000, host = "reins"): string {
  return `events.out.tfevents.${Math.floor(wallTime)}.${host.replace(/[^A-Za-z0-9.-]/g, "_")}`;
}

/**
 * Decodes an event file, checking both CRCs of every record (a test's independent reader; also
 * reads files TensorBoard wrote, scalars only).
 */
export function readTfEvents(bytes: Uint8Array): TfDecodedEvent[] {
  const out: TfDecodedEvent[] = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  while (at < bytes.length) {
    const length = Number(view.getBigUint64(at, true));
    if (view.getUint32(at + 8, true) !== maskedCrc32c(bytes.subarray(at, at + 8))) {
      throw new Error(`tfevents: bad length CRC at byte ${at}`);
    }
    const data = bytes.subarray(at + 12, at + 12 + length);
    if (view.getUint32(at + 12 + length, true) !== maskedCrc32c(data)) {
      throw new Error(`tfevents: bad data CRC at byte ${at}`);
    }
    out.push(decodeEvent(data));
    at += 16 + length;
  }
  return out;
}

function readFields(
  data: Uint8Array,
  each: (field: number, wire: number, value: DataView | bigint | Uint8Array) => void,
): void {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let at = 0;
  const varint = () => {
    let v = 0n;
    let shift = 0n;
    while (true) {
      const b = data[at++];
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
      shift += 7n;
    }
  };
  while (at < data.length) {
    const key = Number(varint());
    const field = key >> 3;
    const wire = key & 7;
    if (wire === 0) each(field, wire, varint());
    else if (wire === 1) {
      each(field, wire, new DataView(data.buffer, data.byteOffset + at, 8));
      at += 8;
    } else if (wire === 5) {
      each(field, wire, new DataView(data.buffer, data.byteOffset + at, 4));
      at += 4;
    } else if (wire === 2) {
      const n = Number(varint());
      each(field, wire, data.subarray(at, at + n));
      at += n;
    } else {throw new Error(
        `tfevents: unsupported wire type ${wire} at ${at} of ${view.byteLength}`,
      );}
  }
}

function decodeEvent(data: Uint8Array): TfDecodedEvent {
  const event: TfDecodedEvent = { wall_time: 0, step: 0, scalars: {} };
  readFields(data, (field, _wire, value) => {
    if (field === 1) event.wall_time = (value as DataView).getFloat64(0, true);
    else if (field === 2) event.step = Number(value as bigint);
    else if (field === 3) event.file_version = new TextDecoder().decode(value as Uint8Array);
    else if (field === 5) {
      readFields(value as Uint8Array, (_f, _w, v) => {
        let tag = "";
        let scalar = NaN;
        readFields(v as Uint8Array, (f, _w2, x) => {
          if (f === 1) tag = new TextDecoder().decode(x as Uint8Array);
          else if (f === 2) scalar = (x as DataView).getFloat32(0, true);
        });
        event.scalars[tag] = scalar;
      });
    }
  });
  return event;
}
