//! The one place bincode is used: length-prefixed, size-bounded binary frames.
//!
//! Owns the frame format (a big-endian u32 length, then a bincode 2 `standard()` payload) and
//! its bounds: a frame longer than the caller's limit is refused before any allocation, and a
//! payload that does not decode is an error, never a panic. Must never be bypassed: every
//! binary wire (the PTY host link, the QUIC peer links' streams) goes through here.

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

/// Write one frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    v: &T,
) -> Result<(), CodecError> {
    let payload = encode(v)?;
    if payload.len() > MAX_FRAME {
        return Err(CodecError::TooLarge {
            len: payload.len(),
            max: MAX_FRAME,
        });
    }
    let mut buf = Vec::with_capacity(payload.len() + 4);
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(&payload);
    w.write_all(&buf).await?;
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
    fn garbage_does_not_decode() {
        assert!(decode::<M>(&[9, 9, 9]).is_err());
        let mut ok = encode(&M::A(vec![])).unwrap();
        ok.push(0);
        assert!(decode::<M>(&ok).is_err());
    }
}
