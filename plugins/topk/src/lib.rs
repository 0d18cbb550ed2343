//! `topk`: the postprocessing step of a classification pipeline. SCORES FP32 `[..., N]` (one row of
//! class scores per item, e.g. softmax probabilities) → LABELS BYTES `[..., K]` (the K best classes'
//! labels, best first) and TOP_SCORES FP32 `[..., K]` (their scores).
//!
//! Model `parameters`: `top_k` (default 3; at most N), `labels` (comma-separated class names, one per
//! class; default the class indices "0", "1", …). Ties keep the lower class index first.
use nereus_sdk::{
    Backend, BytesBuilder, ErrorKind, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter,
};

struct TopK {
    k: usize,
    labels: Option<Vec<String>>,
}

fn settings(model: &ModelInfo) -> Result<TopK, String> {
    let k = match config_parameter(model, "top_k")? {
        None => 3,
        Some(v) => v.trim().parse().map_err(|_| format!("parameter 'top_k' is not a positive integer: {v:?}"))?,
    };
    if k == 0 {
        return Err("parameter 'top_k' must be at least 1".into());
    }
    let labels = config_parameter(model, "labels")?.map(|l| l.split(',').map(|s| s.trim().to_string()).collect());
    Ok(TopK { k, labels })
}

impl TopK {
    fn rank(&self, request: &Request) -> Result<Response, String> {
        let input = request.input("SCORES")?;
        let scores = input.as_slice::<f32>()?;
        let shape = input.shape();
        let Some((&classes, outer)) = shape.split_last() else {
            return Err("SCORES must have at least one dimension".into());
        };
        let classes = usize::try_from(classes).map_err(|_| format!("SCORES has shape {shape:?}"))?;
        if classes < self.k {
            return Err(format!("SCORES has {classes} classes, fewer than top_k ({})", self.k));
        }
        if let Some(labels) = &self.labels
            && labels.len() != classes
        {
            return Err(format!("the model's {} labels do not match SCORES' {classes} classes", labels.len()));
        }
        let mut names = BytesBuilder::new();
        let mut best = Vec::new();
        for row in scores.chunks_exact(classes) {
            let mut order: Vec<usize> = (0..classes).collect();
            order.sort_by(|a, b| row[*b].total_cmp(&row[*a]).then(a.cmp(b)));
            for &class in &order[..self.k] {
                match &self.labels {
                    Some(labels) => names.push(&labels[class]),
                    None => names.push(class.to_string()),
                }
                best.push(row[class]);
            }
        }
        let mut out_shape = outer.to_vec();
        out_shape.push(self.k as i64);
        let mut response = Response::new();
        if request.wants("LABELS") {
            response = response.output(names.finish("LABELS", out_shape.clone()));
        }
        if request.wants("TOP_SCORES") {
            response = response.output(Tensor::from_slice("TOP_SCORES", out_shape, &best));
        }
        Ok(response)
    }
}

impl Backend for TopK {
    fn initialize_model(model: &ModelInfo) -> Result<(), String> {
        settings(model).map(|_| ())
    }

    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        settings(model)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            match self.rank(request) {
                Ok(response) => request.respond(response)?,
                Err(message) => request.fail_with(ErrorKind::InvalidArgument, &message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(TopK);
