//! Link frames: the length-prefixed bincode decoder and every frame type a peer can send.
#![no_main]
use fleetd::codec;
use fleetd::link::endpoint::{Hello, HelloReply};
use fleetd::link::wire::{Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = codec::decode::<Request>(data);
    let _ = codec::decode::<Response>(data);
    let _ = codec::decode::<Hello>(data);
    let _ = codec::decode::<HelloReply>(data);
    // The framed reader, as a stream: a length prefix over the bound is refused before any
    // allocation; frames are read until the bytes run out.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut r = data;
        for _ in 0..16 {
            match codec::read_frame::<_, Request>(&mut r, codec::MAX_FRAME).await {
                Ok(Some(_)) => continue,
                _ => break,
            }
        }
    });
});
