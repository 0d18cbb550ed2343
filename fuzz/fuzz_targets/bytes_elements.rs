//! BYTES tensor decoding (4-byte little-endian length, then the bytes, per element): splitting and
//! counting agree, and a tensor that splits cleanly is exactly its elements re-serialised.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nereus::tensor::{bytes_elements, count_bytes_elements};

fuzz_target!(|data: &[u8]| {
    let elements: Result<Vec<&[u8]>, _> = bytes_elements(data).collect();
    let count = count_bytes_elements(data);
    match elements {
        Ok(elements) => {
            assert_eq!(count, Ok(elements.len() as u64));
            let mut again = Vec::with_capacity(data.len());
            for e in &elements {
                again.extend_from_slice(&(e.len() as u32).to_le_bytes());
                again.extend_from_slice(e);
            }
            assert_eq!(again, data);
        }
        Err(e) => assert_eq!(count, Err(e)),
    }
});
