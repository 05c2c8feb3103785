//! The one place bincode is used: length-prefixed, size-bounded binary frames.
//!
//! Owns the frame format (a big-endian u32 length, then a bincode 2 `standard()` payload) and
//! its bounds: a frame longer than the caller's limit is refused before any allocation, and a
//! payload that does not decode is an error, never a panic. Must never be bypassed: every
//! binary wire (the PTY host link, the QUIC peer links' streams) goes through here. The async
//! `read_frame`/`write_frame` serve tokio streams; `encode_frame_into`/`decode_frame` serve a
//! caller that does its own (non-blocking) I/O, like the PTY host's poll loop.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame any fleetd wire accepts by default.
pub const MAX_FRAME: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("frame does not decode: {0}")]
    Decode(String),
    #[error("frame does not encode: {0}")]
    Encode(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encode a value as a bincode payload (no length prefix).
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(v, config()).map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decode a bincode payload; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let cfg = config().with_limit::<MAX_FRAME>();
    let (v, used) = bincode::serde::decode_from_slice(bytes, cfg)
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError::Decode(format!(
            "{} trailing bytes",
            bytes.len() - used
        )));
    }
    Ok(v)
}

/// Append one frame (length prefix, then payload) to `buf`; on an error `buf` is as it was.
pub fn encode_frame_into<T: Serialize>(buf: &mut Vec<u8>, v: &T) -> Result<(), CodecError> {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    let encoded = bincode::serde::encode_into_std_write(v, buf, config());
    let len = buf.len() - start - 4;
    if let Err(e) = encoded {
        buf.truncate(start);
        return Err(CodecError::Encode(e.to_string()));
    }
    if len > MAX_FRAME {
        buf.truncate(start);
        return Err(CodecError::TooLarge {
            len,
            max: MAX_FRAME,
        });
    }
    buf[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// One frame, length prefix included.
pub fn encode_frame<T: Serialize>(v: &T) -> Result<Vec<u8>, CodecError> {
    let mut buf = Vec::new();
    encode_frame_into(&mut buf, v)?;
    Ok(buf)
}

/// The frame at the start of `buf`, if it is all there: `Ok(Some((value, bytes used)))`, or
/// `Ok(None)` when more bytes are needed. A length over `max` is refused as soon as the prefix
/// is in, so a caller buffering toward a frame never holds more than `4 + max` bytes.
pub fn decode_frame<T: DeserializeOwned>(
    buf: &[u8],
    max: usize,
) -> Result<Option<(T, usize)>, CodecError> {
    let Some(prefix) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(*prefix) as usize;
    if len > max {
        return Err(CodecError::TooLarge { len, max });
    }
    match buf.get(4..4 + len) {
        Some(payload) => decode(payload).map(|v| Some((v, 4 + len))),
        None => Ok(None),
    }
}

/// Write one frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    v: &T,
) -> Result<(), CodecError> {
    w.write_all(&encode_frame(v)?).await?;
    Ok(())
}

/// Read one frame of at most `max` bytes; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
    max: usize,
) -> Result<Option<T>, CodecError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(CodecError::TooLarge { len, max });
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    decode(&buf).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    enum M {
        A(Vec<u8>),
        B { x: u32, s: Option<String> },
    }

    #[tokio::test]
    async fn frames_round_trip_and_bounds_hold() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, &M::A(vec![1, 2, 3])).await.unwrap();
        write_frame(
            &mut a,
            &M::B {
                x: 7,
                s: Some("hi".into()),
            },
        )
        .await
        .unwrap();
        assert_eq!(
            read_frame::<_, M>(&mut b, 1024).await.unwrap(),
            Some(M::A(vec![1, 2, 3]))
        );
        assert_eq!(
            read_frame::<_, M>(&mut b, 1024).await.unwrap(),
            Some(M::B {
                x: 7,
                s: Some("hi".into())
            })
        );
        // A hostile length prefix is refused before allocating.
        a.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        assert!(matches!(
            read_frame::<_, M>(&mut b, 1024).await,
            Err(CodecError::TooLarge { .. })
        ));
        drop(a);
        assert!(read_frame::<_, M>(&mut b, 1024).await.unwrap().is_none());
    }

    #[test]
    fn sync_frames_round_trip_in_pieces_and_bounds_hold() {
        let mut buf = vec![];
        encode_frame_into(&mut buf, &M::A(vec![1, 2, 3])).unwrap();
        let first = buf.len();
        encode_frame_into(&mut buf, &M::B { x: 7, s: None }).unwrap();
        // Byte by byte: nothing until the whole first frame is in.
        for end in 0..first {
            assert!(
                decode_frame::<M>(&buf[..end], 1024).unwrap().is_none(),
                "{end}"
            );
        }
        let (a, used) = decode_frame::<M>(&buf, 1024).unwrap().unwrap();
        assert_eq!((a, used), (M::A(vec![1, 2, 3]), first));
        let (b, used) = decode_frame::<M>(&buf[first..], 1024).unwrap().unwrap();
        assert_eq!((b, first + used), (M::B { x: 7, s: None }, buf.len()));
        // The same bytes as the async writer's.
        assert_eq!(
            &buf[..first],
            &encode_frame(&M::A(vec![1, 2, 3])).unwrap()[..]
        );
        // A hostile length is refused from its prefix alone.
        assert!(matches!(
            decode_frame::<M>(&u32::MAX.to_be_bytes(), 1024),
            Err(CodecError::TooLarge { .. })
        ));
        // A frame over MAX_FRAME is not encoded, and the buffer is left as it was.
        let before = buf.clone();
        assert!(matches!(
            encode_frame_into(&mut buf, &M::A(vec![0; MAX_FRAME + 1])),
            Err(CodecError::TooLarge { .. })
        ));
        assert_eq!(buf, before);
    }

    #[test]
    fn garbage_does_not_decode() {
        assert!(decode::<M>(&[9, 9, 9]).is_err());
        let mut ok = encode(&M::A(vec![])).unwrap();
        ok.push(0);
        assert!(decode::<M>(&ok).is_err());
    }
}
