//! A run's checkpoints: restoring one (refused when another model or optimizer wrote it), the
//! manifest and files of a new one, and the job's retention.

use super::*;

impl Run {
    /// Restores everything a checkpoint holds. One taken from a different model (another shape, a
    /// missing tensor), written by another optimizer or with damaged optimizer state is refused
    /// before anything changes.
    pub fn restore(&mut self, path: &Path) -> anyhow::Result<()> {
        let loaded = checkpoint::load(path)?;
        if loaded.manifest.model != model_json(&self.options.spec) {
            bail!("{} was taken from a different model", path.display());
        }
        if loaded.manifest.optimizer != self.optimizer.kind() {
            bail!(
                "{} was written by the {} optimizer; this job uses {}",
                path.display(),
                loaded.manifest.optimizer,
                self.optimizer.kind()
            );
        }
        let mut tensors = Vec::with_capacity(self.params.names.len());
        for (i, name) in self.params.names.iter().enumerate() {
            let values = loaded
                .params
                .get(name)
                .with_context(|| format!("{} has no tensor {name}", path.display()))?;
            if values.len() != self.params.values[i].len() {
                bail!(
                    "{}: {name} has {} values, the model {}",
                    path.display(),
                    values.len(),
                    self.params.values[i].len()
                );
            }
            tensors.push(values);
        }
        // The optimizer's state replaces its own only once all of it has been read and checked.
        let sizes: Vec<usize> = self.params.values.iter().map(Vec::len).collect();
        self.optimizer
            .restore(&self.params.names, &sizes, |n| {
                loaded.optimizer.get(n).cloned()
            })
            .map_err(|reason| anyhow::anyhow!("{}: optimizer state: {reason}", path.display()))?;
        for (mine, values) in self.params.values.iter_mut().zip(tensors) {
            mine.clone_from(values);
        }
        self.params.sync()?;
        if let Some(resident) = &mut self.resident {
            resident.upload_state(&self.params, &self.optimizer)?;
        }
        self.rng = Rng::from_state(loaded.manifest.rng);
        let samples = match &self.data {
            Data::Classification(c) => c.train.len(),
            Data::Text(t) => match self.options.spec.model {
                drover_core::spec::ModelSpec::Charlm { context, .. } => {
                    t.train.len().saturating_sub(1) / context as usize
                }
                _ => 0,
            },
        };
        self.sampler = Sampler::new(self.options.spec.seed, samples, loaded.manifest.cursor);
        self.step = loaded.manifest.step;
        Ok(())
    }

    /// The manifest of a checkpoint of this run at its current step, its tensors held by `shards`.
    pub fn manifest(&self, metrics: &BTreeMap<String, f64>, shards: Vec<Shard>) -> Manifest {
        Manifest {
            format_version: checkpoint::FORMAT_VERSION,
            step: self.step,
            seed: self.options.spec.seed,
            rng: self.rng.state(),
            cursor: self.sampler.cursor(),
            workers: self.options.workers,
            ps: self.options.ps,
            optimizer: self.optimizer.kind().to_owned(),
            tensors: self
                .params
                .names
                .iter()
                .zip(&self.params.shapes)
                .map(|(name, shape)| TensorInfo {
                    name: name.clone(),
                    shape: shape.clone(),
                })
                .collect(),
            shards,
            metrics: metrics.clone(),
            model: model_json(&self.options.spec),
        }
    }

    /// Writes a checkpoint now (this process holds the whole model and optimizer) and applies
    /// retention.
    pub fn save(&self, metrics: &BTreeMap<String, f64>) -> anyhow::Result<PathBuf> {
        let names = &self.params.names;
        // A run on its device copies its state to the host for the checkpoint.
        let downloaded = match &self.resident {
            Some(resident) => Some(resident.download(&self.params, &self.optimizer)?),
            None => None,
        };
        let (values, optimizer) = match &downloaded {
            Some((values, optimizer)) => (values, optimizer),
            None => (&self.params.values, &self.optimizer),
        };
        let manifest = self.manifest(
            metrics,
            vec![Shard {
                name: "local".to_owned(),
                tensors: names.clone(),
                slices: Vec::new(),
            }],
        );
        let tensors: Vec<(&str, &[usize], &[f32])> = names
            .iter()
            .zip(&self.params.shapes)
            .zip(values)
            .map(|((n, s), v)| (n.as_str(), s.as_slice(), v.as_slice()))
            .collect();
        let path = checkpoint::save(
            &self.options.checkpoint_dir,
            &manifest,
            &tensors,
            &optimizer.state(names),
        )?;
        self.retain();
        Ok(path)
    }

    /// Applies the job's checkpoint retention to its checkpoint directory.
    pub fn retain(&self) {
        let policy = &self.options.checkpoint;
        let (metric, maximise) = match &self.options.spec.target {
            Some(target) => (target.metric.as_str(), target.mode == TargetMode::Max),
            None => ("val_accuracy", true),
        };
        checkpoint::retain(
            &self.options.checkpoint_dir,
            policy.keep_last as usize,
            policy.keep_best as usize,
            metric,
            maximise,
        );
    }
}
