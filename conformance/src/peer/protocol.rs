//! The peer protocol's messages: one JSON [`Request`] per line on the peer's stdin, one JSON
//! [`Reply`] per line on its stdout.

use blockwire::{Op, PeerDescriptor};
use serde::{Deserialize, Serialize};

/// A block pair: `(local, remote)` of a transfer the peer posts, or `(block, source)` of a
/// [`Request::Verify`].
pub type Pair = (u32, u32);

/// [`Op`] as serde writes it (`"Write"`, `"Read"`): core's types carry no serde.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Op")]
enum OpDef {
    Write,
    Read,
}

/// What the driver asks of a peer process. The peer's region was filled with
/// `pattern(seed, i)` (its own pattern, `seed` from its command line) when it started.
///
/// ```
/// use blockwire_conformance::peer::Request;
/// let line = Request::Verify { seed: 1, written: vec![(3, 0)] }.to_line();
/// assert_eq!(line, r#"{"Verify":{"seed":1,"written":[[3,0]]}}"#);
/// assert_eq!(Request::from_line(&line)?, Request::Verify { seed: 1, written: vec![(3, 0)] });
/// assert_eq!(Request::Quit.to_line(), r#""Quit""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// [`Reply::Ok`] if block `b` holds `pattern(seed, s)` for each `(b, s)` of `written` and
    /// every other block its own pattern, else [`Reply::Fail`].
    Verify {
        /// The seed of the written blocks' pattern.
        seed: u8,
        /// `(block, source block)` pairs.
        written: Vec<Pair>,
    },
    /// [`Reply::Ok`] once every block holds its own pattern again.
    Reset,
    /// [`Reply::Ok`] once `descriptor` is registered as peer `name`.
    Add {
        /// The peer name.
        name: String,
        /// The peer's descriptor ([`PeerDescriptor::to_bytes`], in hex).
        descriptor: String,
    },
    /// [`Reply::Ok`] once a WRITE of `pairs` (`(local, remote)`) to `name` is done.
    Write {
        /// The peer name.
        name: String,
        /// `(local, remote)` pairs.
        pairs: Vec<Pair>,
    },
    /// [`Reply::Id`] as soon as a WRITE or READ of `pairs` to `name` is posted,
    /// [`Reply::Refused`] if the transport refused it.
    Post {
        /// WRITE or READ.
        #[serde(with = "OpDef")]
        op: Op,
        /// The peer name.
        name: String,
        /// `(local, remote)` pairs.
        pairs: Vec<Pair>,
    },
    /// Waits up to `ms` for every posted transfer to surface: [`Reply::Settled`], or
    /// [`Reply::Pending`].
    Settle {
        /// The longest wait, in milliseconds.
        ms: u64,
    },
    /// [`Reply::Ok`] once the peer gave up access rights: as root it becomes user `nobody`,
    /// otherwise it makes itself non-dumpable (so same-user processes without
    /// `CAP_SYS_PTRACE` may no longer access its memory).
    DropAccess,
    /// [`Reply::Ok`] once the transport is closed (not dropped: its memory stays mapped) and
    /// every block holds `pattern(seed, i)`, the canary. Ask [`Request::Holds`] about `seed`
    /// first and the canary is made before the close, landing right after it.
    Close {
        /// The canary's seed.
        seed: u8,
    },
    /// [`Reply::Holds`]: how many blocks `i` hold `pattern(seed, i)`.
    Holds {
        /// The pattern's seed.
        seed: u8,
    },
    /// Posts a transfer that carries a notification (`message`): [`Reply::Id`], or
    /// [`Reply::Refused`]; [`Request::Settle`] waits for it like for a plain one.
    PostNotify {
        /// WRITE or READ.
        #[serde(with = "OpDef")]
        op: Op,
        /// The peer name.
        name: String,
        /// `(local, remote)` pairs.
        pairs: Vec<Pair>,
        /// The notification's message.
        message: Vec<u8>,
    },
    /// Posts a standalone notification: [`Reply::Id`] or [`Reply::Refused`].
    Notify {
        /// The peer name.
        name: String,
        /// The message.
        message: Vec<u8>,
    },
    /// Drains notifications from `from` (a sender's transport name; `None`: any) until `count`
    /// arrived or `ms` passed: [`Reply::Notified`]. At the first that arrives, checks the
    /// blocks as [`Request::Verify`] would with `seed` and `written` (none: no check).
    AwaitNotifications {
        /// The sender, or any.
        from: Option<String>,
        /// How many to wait for.
        count: usize,
        /// The longest wait, in milliseconds.
        ms: u64,
        /// The written pattern's seed.
        seed: u8,
        /// `(block, source)` pairs the first notification vouches for.
        written: Vec<Pair>,
    },
    /// Closes and exits 0, without a reply.
    Quit,
}

/// What a peer process answers.
///
/// ```
/// use blockwire_conformance::peer::Reply;
/// let r = Reply::Settled { done: 2, failed: 1, elapsed_ms: 7, first_failure: Some("x".into()) };
/// assert_eq!(Reply::from_line(&r.to_line())?, r);
/// assert_eq!(Reply::Ok.to_line(), r#""Ok""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The first line: the peer's descriptor ([`PeerDescriptor::to_bytes`], in hex).
    Descriptor {
        /// In hex.
        hex: String,
    },
    /// Done.
    Ok,
    /// A [`Request::Verify`] found blocks that hold the wrong bytes.
    Fail {
        /// The blocks.
        blocks: Vec<u32>,
    },
    /// A [`Request::Post`] was posted as transfer `id`.
    Id {
        /// The transfer id.
        id: u64,
    },
    /// A [`Request::Post`] was refused (a submit error or a peer fault).
    Refused {
        /// The error, as it displays.
        why: String,
    },
    /// Every posted transfer surfaced within a [`Request::Settle`]'s wait.
    Settled {
        /// How many were done.
        done: usize,
        /// How many failed.
        failed: usize,
        /// How long it took, in milliseconds.
        elapsed_ms: u64,
        /// The first failure's reason, as it displays.
        first_failure: Option<String>,
    },
    /// Some posted transfers had not surfaced when a [`Request::Settle`]'s wait ended.
    Pending {
        /// How many.
        left: usize,
        /// How long it waited, in milliseconds.
        elapsed_ms: u64,
    },
    /// The answer to [`Request::Holds`].
    Holds {
        /// Blocks holding the pattern.
        blocks: usize,
    },
    /// What a [`Request::AwaitNotifications`] drained.
    Notified {
        /// `(sender, message)`, in drain order.
        notices: Vec<(String, Vec<u8>)>,
        /// Blocks that did not hold what the first notification vouched for when it arrived.
        bad_blocks: Vec<u32>,
    },
    /// The peer failed and exits with status 1.
    Err {
        /// What went wrong.
        message: String,
    },
}

impl Request {
    /// One line of JSON, without the newline.
    ///
    /// ```
    /// use blockwire_conformance::peer::Request;
    /// assert_eq!(Request::Holds { seed: 9 }.to_line(), r#"{"Holds":{"seed":9}}"#);
    /// ```
    pub fn to_line(&self) -> String {
        // Strings, integers and lists: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("\"unserializable: {e}\""))
    }

    /// Reads what [`to_line`](Request::to_line) wrote.
    ///
    /// ```
    /// use blockwire_conformance::peer::Request;
    /// assert_eq!(Request::from_line(r#""Reset""#)?, Request::Reset);
    /// assert!(Request::from_line("RESET").is_err());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn from_line(line: &str) -> Result<Request, serde_json::Error> {
        serde_json::from_str(line)
    }
}

impl Reply {
    /// One line of JSON, without the newline.
    ///
    /// ```
    /// use blockwire_conformance::peer::Reply;
    /// assert_eq!(Reply::Id { id: 3 }.to_line(), r#"{"Id":{"id":3}}"#);
    /// ```
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!("{{\"Err\":{{\"message\":\"unserializable reply: {e}\"}}}}")
        })
    }

    /// Reads what [`to_line`](Reply::to_line) wrote.
    ///
    /// ```
    /// use blockwire_conformance::peer::Reply;
    /// assert_eq!(Reply::from_line(r#"{"Holds":{"blocks":4}}"#)?, Reply::Holds { blocks: 4 });
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn from_line(line: &str) -> Result<Reply, serde_json::Error> {
        serde_json::from_str(line)
    }

    /// The reply carrying `desc`.
    ///
    /// ```
    /// use blockwire::PeerDescriptor;
    /// use blockwire_conformance::peer::Reply;
    /// let d = PeerDescriptor::new("shm", vec![1, 2], 0, 4, 64, "");
    /// assert_eq!(Reply::descriptor(&d).to_descriptor()?, d);
    /// # Ok::<(), String>(())
    /// ```
    pub fn descriptor(desc: &PeerDescriptor) -> Reply {
        Reply::Descriptor {
            hex: hex::encode(desc.to_bytes()),
        }
    }

    /// The descriptor a [`Reply::Descriptor`] carries.
    ///
    /// ```
    /// use blockwire_conformance::peer::Reply;
    /// assert!(Reply::Ok.to_descriptor().is_err());
    /// ```
    pub fn to_descriptor(&self) -> Result<PeerDescriptor, String> {
        let Reply::Descriptor { hex } = self else {
            return Err(format!("expected the peer's descriptor, got {self:?}"));
        };
        let bytes = hex::decode(hex).map_err(|e| format!("descriptor hex: {e}"))?;
        PeerDescriptor::from_bytes(&bytes).map_err(|e| format!("descriptor: {e}"))
    }
}

impl Request {
    /// [`Request::Add`] of `desc` as peer `name`.
    ///
    /// ```
    /// use blockwire::PeerDescriptor;
    /// use blockwire_conformance::peer::Request;
    /// let d = PeerDescriptor::new("shm", vec![1], 0, 4, 64, "");
    /// assert!(matches!(Request::add("parent", &d), Request::Add { name, .. } if name == "parent"));
    /// ```
    pub fn add(name: &str, desc: &PeerDescriptor) -> Request {
        Request::Add {
            name: name.into(),
            descriptor: hex::encode(desc.to_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_and_reply_round_trips_on_one_line() {
        let desc = PeerDescriptor::new("shm", vec![7; 40], 4096, 8, 64, "");
        let requests = [
            Request::Verify {
                seed: 255,
                written: vec![(0, u32::MAX)],
            },
            Request::Reset,
            Request::add("a b\n", &desc),
            Request::Write {
                name: "p".into(),
                pairs: vec![],
            },
            Request::Post {
                op: Op::Write,
                name: "p".into(),
                pairs: vec![(1, 2), (3, 4)],
            },
            Request::Settle { ms: u64::MAX },
            Request::DropAccess,
            Request::Close { seed: 202 },
            Request::Holds { seed: 0 },
            Request::PostNotify {
                op: Op::Read,
                name: "p".into(),
                pairs: vec![(1, 2)],
                message: b"free 2".to_vec(),
            },
            Request::Notify {
                name: "p".into(),
                message: vec![],
            },
            Request::AwaitNotifications {
                from: Some("a".into()),
                count: 2,
                ms: 100,
                seed: 1,
                written: vec![(3, 1)],
            },
            Request::Quit,
        ];
        for r in requests {
            let line = r.to_line();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(Request::from_line(&line).expect("read back"), r);
        }
        let replies = [
            Reply::descriptor(&desc),
            Reply::Ok,
            Reply::Fail { blocks: vec![1, 5] },
            Reply::Id { id: u64::MAX },
            Reply::Refused {
                why: "submit: \"quoted\"".into(),
            },
            Reply::Settled {
                done: 0,
                failed: 3,
                elapsed_ms: 10,
                first_failure: None,
            },
            Reply::Pending {
                left: 2,
                elapsed_ms: 10_000,
            },
            Reply::Holds { blocks: 16 },
            Reply::Notified {
                notices: vec![("a".into(), b"x\n".to_vec())],
                bad_blocks: vec![],
            },
            Reply::Err {
                message: "line one\nline two".into(),
            },
        ];
        for r in replies {
            let line = r.to_line();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(Reply::from_line(&line).expect("read back"), r);
        }
        assert_eq!(
            Reply::descriptor(&desc)
                .to_descriptor()
                .expect("a descriptor"),
            desc
        );
    }
}
