//! The one implementation of [`super::ChangeStore`], instantiated per database with what differs:
//! how a snapshot is begun and where its cursor lies (see [`super::changes`]).

macro_rules! impl_change_store {
    ($store:ty, $db:ty) => {
        #[async_trait]
        impl $crate::ChangeStore for $store {
            async fn active_changes(
                &self,
                since: Option<$crate::ChangeCursor>,
            ) -> StoreResult<$crate::ActiveChanges> {
                let mut tx = self.pool.begin_with(<Self as $crate::sql::Dialect>::BEGIN_SNAPSHOT).await?;
                // First, so that it is the snapshot the reads below see.
                let cursor: i64 = sqlx::query_scalar(<Self as $crate::sql::Dialect>::CHANGE_CURSOR)
                    .fetch_one(&mut *tx)
                    .await?;
                let (jobs, tasks, nodes) = match since {
                    None => {
                        let sql = concat!("SELECT ", job_columns!(), " FROM jobs j JOIN tenants t ON t.id = j.tenant_id \
                             WHERE j.state IN ('queued', 'starting', 'running', 'rescaling') ORDER BY j.id");
                        let jobs = sqlx::query(sql).fetch_all(&mut *tx).await?;
                        let sql = concat!("SELECT ", task_columns!(), " FROM tasks WHERE state NOT IN ('exited', 'lost') \
                             ORDER BY job_id, generation, role DESC, idx");
                        let tasks = sqlx::query(sql).fetch_all(&mut *tx).await?;
                        let sql = concat!("SELECT ", node_columns!(), " FROM nodes ORDER BY name");
                        let nodes = sqlx::query(sql).fetch_all(&mut *tx).await?;
                        (jobs, tasks, nodes)
                    }
                    Some($crate::ChangeCursor(since)) => {
                        // What changed is few rows of many, which the `changed` indexes find;
                        // a planner without statistics (a fresh database) would scan the tables.
                        if let Some(prefer) = <Self as $crate::sql::Dialect>::PREFER_INDEXES {
                            sqlx::query(prefer).execute(&mut *tx).await?;
                        }
                        let (open, close) = <Self as $crate::sql::Dialect>::CURSOR_VALUE;
                        let below = <Self as $crate::sql::Dialect>::CHANGED_BELOW;
                        let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                            "SELECT ", job_columns!(), " FROM jobs j JOIN tenants t ON t.id = j.tenant_id WHERE j.changed >= "
                        ));
                        query.push(open).push_bind(since).push(close);
                        if let Some(below) = below {
                            query.push(" AND j.changed < ").push(below);
                        }
                        query.push(" ORDER BY j.id");
                        let jobs = query.build().fetch_all(&mut *tx).await?;
                        let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                            "SELECT ", task_columns!(), " FROM tasks WHERE changed >= "
                        ));
                        query.push(open).push_bind(since).push(close);
                        if let Some(below) = below {
                            query.push(" AND changed < ").push(below);
                        }
                        query.push(" ORDER BY job_id, generation, role DESC, idx");
                        let tasks = query.build().fetch_all(&mut *tx).await?;
                        let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                            "SELECT ", node_columns!(), " FROM nodes WHERE changed >= "
                        ));
                        query.push(open).push_bind(since).push(close);
                        if let Some(below) = below {
                            query.push(" AND changed < ").push(below);
                        }
                        query.push(" ORDER BY name");
                        let nodes = query.build().fetch_all(&mut *tx).await?;
                        (jobs, tasks, nodes)
                    }
                };
                tx.commit().await?;
                Ok($crate::ActiveChanges {
                    whole: since.is_none(),
                    jobs: jobs.iter().map(|row| job_from_row(row, false)).collect::<StoreResult<_>>()?,
                    tasks: tasks.iter().map(task_from_row).collect::<StoreResult<_>>()?,
                    nodes: nodes.iter().map(node_from_row).collect::<StoreResult<_>>()?,
                    cursor: $crate::ChangeCursor(cursor),
                })
            }
        }
    };
}
pub(super) use impl_change_store;
