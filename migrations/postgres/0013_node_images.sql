-- Whether the node's executor runs tasks in OCI images (`spec.command.image`), as it registered: in
-- its sandboxes with skopeo and umoci, or as Kubernetes Pods. Jobs with an image go only to such nodes.
ALTER TABLE nodes ADD COLUMN runs_images boolean NOT NULL DEFAULT false;
