//! [`Notification`]: a short message that travels with a transfer (or alone) to its target, and
//! the frame a backend carries it in.
//!
//! Frame, version 1, integers little-endian (what the shm, ucx and libfabric backends send; NIXL
//! carries the sender's name itself):
//!
//! | field | bytes |
//! |---|---|
//! | magic `BWN1` | 4 |
//! | sender name length, then name (UTF-8, 1..=[`MAX_NAME_LEN`]) | u8 + n |
//! | message length, then message (0..=[`MAX_NOTIFICATION_LEN`]) | u32 + n |
//!
//! Nothing may follow. The frame comes from a peer: [`decode_frame`] checks every length and
//! never panics.

use std::fmt;

/// The longest message a notification may carry, in bytes: a longer one is refused before
/// anything moves.
///
/// ```
/// assert_eq!(blockwire_core::MAX_NOTIFICATION_LEN, 4096);
/// ```
pub const MAX_NOTIFICATION_LEN: usize = 4096;

/// The longest transport name, in bytes.
///
/// ```
/// assert_eq!(blockwire_core::MAX_NAME_LEN, 128);
/// ```
pub const MAX_NAME_LEN: usize = 128;

const MAGIC: &[u8; 4] = b"BWN1";

/// A notification drained at its target: who sent it (the sender transport's name, as its
/// descriptor states it) and the message.
///
/// ```
/// use blockwire_core::Notification;
/// let n = Notification::new("prefill-0", b"blocks 3..7 read".to_vec());
/// assert_eq!(n.sender, "prefill-0");
/// assert_eq!(n.message, b"blocks 3..7 read");
/// ```
#[non_exhaustive]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Notification {
    /// The sending transport's name. It is what the sender says it is: a peer on the same
    /// fabric can claim any name, as with NIXL's agent names.
    pub sender: String,
    /// The message, at most [`MAX_NOTIFICATION_LEN`] bytes.
    pub message: Vec<u8>,
}

impl Notification {
    /// A notification from its parts.
    ///
    /// ```
    /// # use blockwire_core::Notification;
    /// assert!(Notification::new("a", vec![]).message.is_empty());
    /// ```
    pub fn new(sender: impl Into<String>, message: Vec<u8>) -> Self {
        Notification {
            sender: sender.into(),
            message,
        }
    }
}

impl fmt::Debug for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notification")
            .field("sender", &self.sender)
            .field("message", &String::from_utf8_lossy(&self.message))
            .finish()
    }
}

/// Why a transport name is not acceptable, or `None`: 1..=[`MAX_NAME_LEN`] bytes of UTF-8
/// with no control characters.
///
/// ```
/// use blockwire_core::name_problem;
/// assert_eq!(name_problem("decode-0"), None);
/// assert!(name_problem("").is_some());
/// assert!(name_problem("a\nb").is_some());
/// ```
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a transport name must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "a transport name is at most {MAX_NAME_LEN} bytes, this one {}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Some(format!("transport name {name:?} holds a control character"));
    }
    None
}

/// Encodes a notification's frame (see the module's table). `sender` must pass
/// [`name_problem`] and `message` be at most [`MAX_NOTIFICATION_LEN`] bytes; the transport
/// checked both before a backend sees them.
///
/// ```
/// use blockwire_core::{decode_frame, encode_frame, Notification};
/// let frame = encode_frame("prefill-0", b"done");
/// assert_eq!(decode_frame(&frame), Ok(Notification::new("prefill-0", b"done".to_vec())));
/// ```
pub fn encode_frame(sender: &str, message: &[u8]) -> Vec<u8> {
    let name = &sender.as_bytes()[..sender.len().min(MAX_NAME_LEN)];
    let len = message.len().min(MAX_NOTIFICATION_LEN);
    let mut out = Vec::with_capacity(9 + name.len() + len);
    out.extend_from_slice(MAGIC);
    // At most MAX_NAME_LEN (128): fits a byte.
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&message[..len]);
    out
}

/// Decodes a frame a peer sent; every length is checked, and nothing may follow.
///
/// ```
/// use blockwire_core::decode_frame;
/// assert!(decode_frame(b"BWN1").is_err());
/// assert!(decode_frame(b"nope").is_err());
/// ```
pub fn decode_frame(frame: &[u8]) -> Result<Notification, String> {
    let rest = frame
        .strip_prefix(MAGIC)
        .ok_or("not a blockwire notification frame (bad magic)")?;
    let (&name_len, rest) = rest
        .split_first()
        .ok_or("truncated before the name length")?;
    let name_len = usize::from(name_len);
    if rest.len() < name_len {
        return Err(format!(
            "truncated name: {name_len} bytes announced, {} left",
            rest.len()
        ));
    }
    let (name, rest) = rest.split_at(name_len);
    let sender = std::str::from_utf8(name).map_err(|e| format!("sender name: {e}"))?;
    if let Some(problem) = name_problem(sender) {
        return Err(problem);
    }
    if rest.len() < 4 {
        return Err("truncated before the message length".into());
    }
    let (len, message) = rest.split_at(4);
    let mut len_bytes = [0u8; 4];
    len_bytes.copy_from_slice(len);
    let len = usize::try_from(u32::from_le_bytes(len_bytes)).unwrap_or(usize::MAX);
    if len > MAX_NOTIFICATION_LEN {
        return Err(format!(
            "message of {len} bytes exceeds {MAX_NOTIFICATION_LEN}"
        ));
    }
    if message.len() != len {
        return Err(format!(
            "message of {len} bytes announced, {} present",
            message.len()
        ));
    }
    Ok(Notification::new(sender, message.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let frame = encode_frame("peer-a", b"hello");
        for n in 0..frame.len() {
            assert!(decode_frame(&frame[..n]).is_err(), "prefix {n}");
        }
        let mut longer = frame.clone();
        longer.push(0);
        assert!(decode_frame(&longer).is_err());
    }

    #[test]
    fn oversized_and_invalid_fields_are_refused() {
        let mut frame = encode_frame("peer-a", b"");
        let at = 4 + 1 + 6;
        frame[at..at + 4].copy_from_slice(&(MAX_NOTIFICATION_LEN as u32 + 1).to_le_bytes());
        assert!(decode_frame(&frame).unwrap_err().contains("exceeds"));
        let mut bad = encode_frame("peer-a", b"x");
        bad[5] = 0xff; // not UTF-8
        assert!(decode_frame(&bad).is_err());
        let empty = encode_frame("", b"x");
        assert!(decode_frame(&empty).is_err());
    }
}
