// Package transport carries lifecycle updates from engines in other
// processes — in any language — to an otelstats.Tracker: a Collector that
// reads Unix sockets, TCP on the loopback interface, stdin and HTTP bodies,
// a Server that owns the Collector's listeners, HTTP server, limits and
// drain (what `llmtrace collect` runs), and a Go Producer that never blocks
// its engine.
//
// # Streams
//
// A stream is one connection (or stdin, or one HTTP body) from one producer.
// Its first byte decides its encoding: 'L' starts the binary encoding's
// header, '{' (after optional whitespace, or a UTF-8 byte order mark, as
// an editor writes) starts JSON lines. Anything else ends the stream as
// garbage. A byte order mark before any later JSON line is skipped too
// (saved streams concatenated).
//
// Every stream should begin with its producer's clock anchor (a HELLO): the
// producer's wall clock and monotonic clock read at the same instant. An
// update may then carry its time on the monotonic clock, which the collector
// maps onto wall time as
//
//	wall = hello.wall + (update.mono − hello.mono)
//
// so intervals within the producer come from its monotonic clock and only
// the anchor crosses the process boundary as wall time (SPEC §5). An update
// may instead carry wall time directly. A later HELLO on the same stream
// replaces the anchor; a monotonic time before any HELLO is rejected
// (counted as no_anchor). With Config.AlignClocks the collector also
// replaces the producer's wall clock by its own: the offset between the
// producer's first HELLO's wall time and the collector's clock when it
// arrived is added to every time of the stream, which removes the skew of
// a producer on the same host whose wall clock is off (see AlignClocks).
// A producer's later streams — it reconnected, or it posts HTTP bodies —
// keep that offset: a producer is known by its HELLO's name and the
// difference between the HELLO's wall and monotonic readings (within a
// millisecond; a producer whose HELLOs carry no monotonic reading, by its
// name alone), so measuring it again, with another HELLO's delivery
// delay, never moves its later updates against its earlier ones.
// Any value may arrive, up to int64's range: a time whose mapping leaves
// 1970–2200 (or would overflow) is rejected as bad_timestamp, never
// wrapped around. A live tracker (otelstats.WithAutoSweep, as collect runs)
// also rejects an update more than a minute ahead of its own clock
// (otelstats.WithMaxClockAhead): one producer with a skewed clock cannot
// end the others' requests.
//
// # Sides and presence
//
// A HELLO may name the side its producer records for (frontend or engine).
// A stream is a producer of that side, and of the side of every update it
// carries (an update's own side, else its kind's; ARRIVED counts for no
// side, as an engine that records arrivals itself is no frontend). While
// the stream is open the collector tells the tracker the side is present
// (Tracker.SideConnected, SPEC §1): a request the other side finishes then
// waits, within the grace period, for this side's updates still on their
// way, and nothing of a request whose two sides reported within the grace
// is lost, whichever stream is read first. Name the side in the HELLO: it
// makes the side present from the moment the producer connects, before its
// first update. An HTTP body holds no connection: its sides stay present
// for HTTPPresence (a minute) after it, so an HTTP producer that posts at
// least once a minute (a HELLO alone will do) is always present.
//
// The side a HELLO names is also the default side of the stream's updates
// that carry none: a FINISHED without a side on a stream whose HELLO said
// engine is the engine's (as the Producer with ProducerConfig.Side sends
// it), not the frontend's. Kinds that belong to one side keep theirs
// (ARRIVED, INPUT_PROCESSED and DETOKENIZED the frontend's, the
// scheduler's kinds the engine's), and on a stream whose HELLO names no
// side, FINISHED without one is the frontend's. A later HELLO naming a
// side replaces the default; one naming none keeps it. An HTTP body is a
// stream of its own: its HELLO decides for that body alone.
//
// # The token
//
// A collector may require a shared token (Config.Token; collect's
// -token-file or $LLMTRACE_COLLECTOR_TOKEN) from producers that reach it
// over TCP or HTTP; Unix sockets, guarded by the socket file's permissions,
// and stdin are trusted. Such a stream's first frame or line must be a
// HELLO carrying the token (the binary HELLO's field 0x40, the JSON HELLO's
// "token"); anything else first, or a wrong token, ends the stream, counted
// as unauthorized. An HTTP request may instead send
// "Authorization: Bearer TOKEN" (a wrong one is answered 401 before the
// body is read). Tokens are compared in constant time and are at most
// MaxTokenLen (256) bytes. A stream connection has Config.HelloTimeout
// (10 s) from connecting to deliver that HELLO, however it trickles bytes;
// then it is closed, counted as timeout (as unauthorized when it ends
// inside a JSON line).
//
// # Limits
//
// Config.MaxConns (1,024) caps the connections open at once, stream and
// HTTP together. A connection's producer is proven once it has presented
// the token (a HELLO carrying it, or an HTTP request's bearer header) or,
// where no token is asked, once it has delivered a HELLO or an update.
// A connection over the cap takes the slot of the oldest connection not
// yet proven — silent, or sending bytes that prove nothing — which is
// closed and counted as evicted; when every one is proven, the newcomer
// is accepted and closed at once, counted as refused. So peers without
// the token cannot lock producers out, however they trickle, and a proven
// producer is never evicted. Accept errors (the file-descriptor limit)
// are counted and retried with a backoff of 5 ms doubling to 1 s. Config.IdleTimeout
// (2 min) closes a connection that delivers no byte for that long, counted
// as timeout: an idle producer sends a PING (binary frame type 0x03, or an
// empty line in JSON) now and then — the Producer does every 30 s. A
// stream takes its read buffer (MaxFrame or MaxLine, 64 KiB) only when its
// first byte arrives. A Server's HTTP server has ReadHeaderTimeout 10 s,
// ReadTimeout and WriteTimeout 1 min, IdleTimeout 2 min and
// MaxHeaderBytes 64 KiB; a body is cut at Config.MaxBody (32 MiB), answered
// 413 with what preceded the limit recorded. A body sent with
// Content-Encoding: gzip is decompressed, MaxBody bounding it decompressed;
// one cut short or corrupt is answered 400 with what came before the
// damage recorded, and another coding 415. It speaks HTTP/1.1 and HTTP/2
// over cleartext with prior knowledge (h2c), one stream at a time per
// HTTP/2 connection, so that MaxConns bounds the bodies read at once as
// over HTTP/1.1; ReadTimeout cuts one stream's stalled body (answered
// 408), not the connection.
//
// # JSON lines
//
// One JSON object per line ('\n'- or "\r\n"-terminated, at most
// Config.MaxLine bytes before the end), in the update-log format of
// ParseUpdate, plus:
//
//	{"type":"HELLO","producer":"engine-0","wall_ts":1700000000.123456789,"mono_ts":8123.000123456,"side":"engine","token":"s3cret"}
//	{"request_id":"r1","type":"QUEUED","mono_ts":8123.004}
//
// side and token are optional; side is also the default side of the
// stream's FINISHED lines that give none (see Sides and presence). An
// empty line is a PING.
// wall_ts is Unix seconds, mono_ts seconds on the producer's monotonic
// clock (any origin), both decimal and read exactly to the nanosecond. An
// update line carries ts (Unix seconds) or mono_ts; when it has both, ts
// wins, and a null one counts as absent (Python's json.dumps writes an
// unset field as null). A final line without its newline is taken as if
// it had one when it is a whole JSON object (applied, or rejected for the
// rule it breaks) and counted as truncated when it ends inside its object;
// a longer line than MaxLine is skipped up to its newline and counted as
// oversized.
//
// # Binary encoding, version 1
//
// All integers are big-endian or unsigned LEB128 varints ("uvarint": 7 bits
// per byte, low group first, high bit set on every byte but the last; at
// most 10 bytes; protobuf's and Go's binary.Uvarint). A "string" is a
// uvarint byte length followed by that many bytes of UTF-8.
//
// The stream starts with a 5-byte header:
//
//	offset 0  4 bytes  magic "LLMT" (0x4C 0x4C 0x4D 0x54)
//	offset 4  1 byte   version, 0x01
//
// then frames, back to back:
//
//	offset 0  4 bytes  L, big-endian uint32: the number of bytes that follow
//	                   (type + body); 1 ≤ L ≤ MaxFrame (65,536 by default)
//	offset 4  1 byte   frame type: 0x01 HELLO, 0x02 UPDATE, 0x03 PING (no
//	                   body: keeps an idle connection open); other types
//	                   are skipped (reserved for later versions)
//	offset 5  L−1      body
//
// A length of 0 or above MaxFrame cannot be resynchronised from, so it ends
// the stream (counted as oversized). A frame whose body does not decode is
// skipped (counted as malformed); the stream goes on with the next frame.
//
// HELLO body:
//
//	uvarint  wall_ns   Unix time of the anchor, nanoseconds (> 0)
//	uvarint  mono_ns   the producer's monotonic clock at the same instant, ns
//	string   producer  a name for logs (≤ 256 bytes; may be empty)
//	fields   optional, until the end of the frame, with the ids and rules
//	         of an UPDATE's fields:
//
//	  0x01 side   1 frontend, 2 engine: the side this producer records for,
//	              and the side of its FINISHED frames that give none
//	  0x40 token  the collector's shared token (≤ 256 bytes)
//
// UPDATE body:
//
//	u8       kind      1 ARRIVED, 2 INPUT_PROCESSED, 3 QUEUED, 4 PREFILLING,
//	                   5 PREEMPTED, 6 DECODING, 7 DETOKENIZED, 8 FINISHED
//	                   (vLLM's RequestStatsUpdate.Type + 1), 9 REMOTE_KV_WAIT,
//	                   10 REMOTE_KV_READY, 11 ENCODING, 12 ENCODED
//	u8       flags     bits 0–1 side: 0 from the kind (FINISHED: the
//	                   HELLO's side, else frontend), 1 frontend,
//	                   2 engine; bit 2: time is monotonic
//	                   (mapped through the HELLO), else Unix wall time;
//	                   bits 3–7 zero
//	uvarint  time_ns   the update's time, nanoseconds
//	string   request_id  1–512 bytes (a longer one: the update is
//	                     rejected as too_long)
//	fields   until the end of the frame, each one byte id then a value:
//	         ids 0x01–0x3F carry a uvarint, ids 0x40–0x7F a string; an
//	         unknown id in those ranges is skipped, ids 0x00 and 0x80–0xFF
//	         make the frame malformed. A repeated field's last value wins.
//	         The fields are the update log's, under the same rules:
//
//	  0x01 num_prompt_tokens    required on INPUT_PROCESSED
//	  0x02 num_computed_tokens  required on PREFILLING
//	  0x03 num_cached_tokens    required on PREFILLING
//	  0x04 num_new_tokens       required on DETOKENIZED; DECODING: default 1
//	                            (num_accepted_tokens + 1 with 0x09)
//	  0x05 busy_ns              detokenizer busy time of a delivery
//	  0x06 num_output_tokens    the frontend's FINISHED: an output in one piece
//	  0x07 num_remote_tokens    required on REMOTE_KV_READY
//	  0x08 kv_bytes             REMOTE_KV_READY (at most 2^50)
//	  0x09 num_draft_tokens     DECODING, with 0x0A (speculative decoding)
//	  0x0A num_accepted_tokens  DECODING, with 0x09
//	  0x0B num_items            required on ENCODING
//	  0x0C num_encoder_tokens   ENCODING
//	  0x0D encoder_cache_hit    ENCODED: 1 when the encoder cache served it
//	  0x40 model                required on ARRIVED
//	  0x41 operation
//	  0x42 scope
//	  0x43 finish_reason        required on FINISHED
//	  0x44 error_type
//	  0x45 sampling_params      a JSON object as in the update log
//	  0x46 pd_role              ARRIVED: prefill or decode (SPEC §7)
//	  0x47 kv_source            required on REMOTE_KV_WAIT
//	  0x48 kv_status            REMOTE_KV_READY: ok or failed
//	  0x49 lora_adapter         ARRIVED (SPEC §9)
//	  0x4A traceparent          ARRIVED: the W3C trace context it came with
//	  0x4B tracestate           with 0x4A
//
// Counts above 2^30 are rejected as absurd (a Producer writes a negative
// count, which the tracker would reject, as its 64-bit two's complement,
// so that it is rejected too). Strings are cut, never
// refused (the request_id excepted): at 1,024 bytes, stop sequences at 512
// and nine of them, still longer than the tracker keeps, which cuts them
// again at its own caps and counts the cut, or rejects a scope or
// kv_source as too long, as it does in process.
//
// For example, a HELLO from "e0" anchored at wall 1700000000 s, mono 5 s,
// after the header:
//
//	4C 4C 4D 54 01                 header: "LLMT", version 1
//	00 00 00 12                    L = 18
//	01                             HELLO
//	80 80 A8 B1 E3 9F E7 CB 17     wall_ns 1700000000000000000
//	80 E4 97 D0 12                 mono_ns 5000000000
//	02 65 30                       producer "e0"
//
// The same HELLO naming its side (engine) and carrying the token "s3cret":
//
//	00 00 00 1C                    L = 28
//	01                             HELLO
//	80 80 A8 B1 E3 9F E7 CB 17     wall_ns
//	80 E4 97 D0 12                 mono_ns
//	02 65 30                       producer "e0"
//	01 02                          field 0x01 side: engine
//	40 06 73 33 63 72 65 74        field 0x40 token: "s3cret"
//
// and DECODING of request "0123456789abcdef" by the engine at mono
// 8123.000123456 s (31 bytes):
//
//	00 00 00 1B                    L = 27
//	02                             UPDATE
//	06                             kind DECODING
//	06                             flags: side engine (2) | monotonic (4)
//	C0 E0 A5 C4 B4 EC 01           time_ns 8123000123456
//	10 30 31 … 66                  request_id, 16 bytes
//	                               (no fields: num_new_tokens defaults to 1)
//
// # Drops
//
// Producers never block on the collector. The collector reads each stream as
// fast as it arrives and hands decoded updates to a bounded queue; when the
// queue is full the update is dropped and counted. The Go Producer keeps a
// bounded buffer of its own: Send never blocks, a full buffer drops and
// counts, and a lost connection is re-dialled with exponential backoff.
package transport
