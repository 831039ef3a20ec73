"""TM111: print/log every training step, and the guards that make it fine."""


def test_print_in_the_step_loop_is_flagged(lines):
    source = """
        for epoch in range(epochs):
            for step, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            print(f"epoch {epoch} done")
    """
    assert lines(source, "TM111") == [7]


def test_logger_in_a_function_called_every_step_names_the_call(lint):
    source = """
        import logging
        log = logging.getLogger(__name__)

        def report(step, loss):
            log.info("step %d loss %f", step, loss)

        for step, batch in enumerate(loader):
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            report(step, loss)
    """
    [(line, message)] = lint(source, "TM111")
    assert line == 6
    assert "called every step at line 12" in message


def test_training_step_of_a_framework_is_per_step(lines):
    source = """
        class Model(LightningModule):
            def training_step(self, batch, batch_idx):
                loss = self.loss(batch)
                print(loss)
                self.log("train_loss", loss)
                return loss
    """
    assert lines(source, "TM111") == [5]


def test_rate_limited_and_one_off_prints_are_not_flagged(lines):
    source = """
        import logging
        logger = logging.getLogger(__name__)
        print("starting")
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            if i % args.print_freq == 0:
                print(i, loss.item())
            if verbose:
                logger.info("loss %s", loss)
            logger.debug("step %d", i)
            if i == len(loader) - 1:
                print("last batch")
        for name in names:
            print(name)
    """
    assert lines(source, "TM111") == []


def test_else_branch_of_a_rate_limit_still_runs_every_step(lines):
    source = """
        for step in range(max_steps):
            loss = model(next(it)).mean()
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                pass
            else:
                print("step", step)
    """
    assert lines(source, "TM111") == [9]


def test_noqa_silences_the_line():
    import textwrap

    from trainmedic.lint import lint_source

    source = textwrap.dedent("""
        for batch in loader:
            model(batch).sum().backward()
            opt.step()
            print("x")  # noqa: TM111
            print("y")  # noqa: E501
    """)
    assert [v.line for v in lint_source(source) if v.code == "TM111"] == [6]


def test_a_print_before_break_runs_once_but_one_behind_a_rank_check_runs_every_step(lines):
    # Reduced from a REINFORCE example ("Solved!" then break) and a Fabric meta-learning loop.
    source = """
        for episode in range(num_episodes):
            loss = run_episode(policy)
            loss.backward()
            optimizer.step()
            if running_reward > threshold:
                print("solved at episode", episode)
                break
            if rank == 0:
                print("iteration", episode)
    """
    assert lines(source, "TM111") == [10]
