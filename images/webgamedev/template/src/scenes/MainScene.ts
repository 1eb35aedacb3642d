import Phaser from 'phaser';

// A starting point: a ball drawn at run time (no asset files needed) that
// bounces around, and a line of text. Replace with your game.
export class MainScene extends Phaser.Scene {
  constructor() {
    super('main');
  }

  create(): void {
    const g = this.add.graphics();
    g.fillStyle(0xe63946);
    g.fillCircle(24, 24, 24);
    g.generateTexture('ball', 48, 48);
    g.destroy();

    const ball = this.physics.add.image(400, 200, 'ball');
    ball.setVelocity(180, 60).setBounce(1, 0.9).setCollideWorldBounds(true);

    this.add.text(16, 16, 'Phaser + Vite + TypeScript', { fontFamily: 'sans-serif', fontSize: '28px', color: '#f1faee' });

    // Scenes mark themselves ready for tests and tooling.
    this.game.events.emit('scene-ready', this.scene.key);
    this.registry.set('ready', true);
  }
}
