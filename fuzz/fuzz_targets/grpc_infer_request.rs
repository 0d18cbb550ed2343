//! A gRPC ModelInferRequest (the message of ModelInfer and of each ModelStreamInfer request): the
//! protobuf decoding, the translation to the server's request (typed `contents` and
//! `raw_input_contents`, parameters) and validation against a model.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nereus::frontend::grpc::convert;
use nereus::proto::inference::ModelInferRequest;
use nereus::shm::SystemShm;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = ModelInferRequest::decode(data) else { return };
    let shm = SystemShm::new(false);
    if let Ok((request, _outputs)) = convert::request(message, &shm) {
        nereus_fuzz::validate_and_check(request);
    }
});
