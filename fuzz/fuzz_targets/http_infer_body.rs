//! The HTTP infer body, in all three framings: JSON alone, JSON followed by binary tensors
//! (`Inference-Header-Content-Length`), and the raw binary request (header length 0). The first
//! byte picks the framing; for the binary extension the next two give the header length.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nereus::frontend::http::codec::decode_request;
use nereus::shm::SystemShm;
use nereus::tensor::DataType;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (header_len, body) = match mode % 3 {
        0 => (None, rest),
        1 => match rest.split_first_chunk::<2>() {
            Some((len, body)) => (Some(usize::from(u16::from_le_bytes(*len))), body),
            None => return,
        },
        _ => (Some(0), rest),
    };
    let shm = SystemShm::new(false);
    let raw_input = || Ok(("INPUT0".to_string(), DataType::Int32, vec![-1], true));
    if let Ok((request, _outputs)) = decode_request(Bytes::copy_from_slice(body), header_len, raw_input, &shm) {
        nereus_fuzz::validate_and_check(request);
    }
});
